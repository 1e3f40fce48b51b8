"""Version 2 of the user's PySpark job (``orders_stream.py``): checkpoint-breaking on purpose.

The same job with one stateful operator added (``dropDuplicates`` on the Kafka coordinates): its
state store does not exist in a v1 checkpoint, so v2 cannot resume one. It writes the same rows, so
its sink compares like v1's. A second file, not a flag: the users' jobs take no product flags.
Python puts this file's folder first on ``sys.path``, so the v1 module beside it imports as is.
"""

from __future__ import annotations

import orders_stream
from pyspark.sql import DataFrame


def rows_v2(df: DataFrame) -> DataFrame:
    return orders_stream.rows(df).dropDuplicates(["topic", "partition", "offset"])


if __name__ == "__main__":
    orders_stream.main(transform=rows_v2)
