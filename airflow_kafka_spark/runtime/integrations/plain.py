"""Integration ``none``: the user's application exactly as registered, nothing added.

For a job that must run without even a configuration line from the product (a locked-down
cluster, an image that refuses extra jars). What the product still does: it submits and watches
the job, validates, backs up and resets its checkpoint, and a reset's start stays exact because
Spark reads it from the new checkpoint's ``sources/`` log, whatever the job's ``startingOffsets``;
the health gate checks it. What it cannot do: ask the job to stop. A stop kills the driver at once
(waiting for a marker nobody reads would only add the stop timeout to the downtime) and says which
batch, if any, Spark will replay.
"""

from __future__ import annotations

from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.integrations import Launch, LaunchFacts, own_arguments


class PlainIntegration:
    """See the module doc."""

    reads_starting_offsets_file = False
    stops_on_marker = False

    def launch(self, spec: JobSpec, facts: LaunchFacts) -> Launch:
        return Launch(args=tuple(own_arguments(spec, facts)))


    def stop_witness(self, spec: JobSpec) -> None:
        return None   # the checkpoint's files are the only witness


INTEGRATION = PlainIntegration()
