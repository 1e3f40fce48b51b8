"""`python -m airflow_kafka_spark.cli` is `aks`."""
import sys

from airflow_kafka_spark.cli import entry

sys.exit(entry())
