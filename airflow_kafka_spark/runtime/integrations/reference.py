"""The bundled reference jobs' command-line contract: the product tells the job where everything is.

The reference job (``jobs/reference_job.py``) and the DStream reference job take the registry's
values as flags (``registry.fields.MANAGED_FLAGS``) before their own ``application_args``, poll the
stop marker themselves and read a reset's offsets from ``--starting-offsets-file``. It is an
example of a job written for this product; users' own jobs use :mod:`.agent` or :mod:`.plain`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import is_secret_key
from airflow_kafka_spark.registry.model import JobKind, JobSpec
from airflow_kafka_spark.runtime import dstream
from airflow_kafka_spark.runtime.integrations import Launch, LaunchFacts, own_arguments

# Kafka connection keys forwarded to the job as ``--kafka-option kafka.<key>=<value>``: the ones
# the Java client names the same way and that are never secret. Credentials are never put on a
# command line (``ps`` shows it to every user of the host and Spark logs it); a job that needs
# SASL credentials gets them from the cluster (a JAAS file shipped with spark.files and
# ``-Djava.security.auth.login.config`` in spark_conf).
FORWARDED_KAFKA_KEYS = (
    "security.protocol",
    "sasl.mechanism",
    "ssl.endpoint.identification.algorithm",
    "client.dns.lookup",
)


def kafka_job_options(kafka_config: Mapping[str, Any]) -> list[str]:
    """``kafka.<key>=<value>`` options for the job, from the non-secret keys of the connection."""
    out = []
    for key in FORWARDED_KAFKA_KEYS:
        value = kafka_config.get(key)
        if value in (None, "") or is_secret_key(key):
            continue
        if key == "security.protocol" and str(value).upper() == "PLAINTEXT":
            continue
        out.append(f"kafka.{key}={value}")
    return out


def job_arguments(
    spec: JobSpec,
    *,
    bootstrap_servers: str,
    starting_offsets_file: str | None = None,
    kafka_options: Sequence[str] = (),
) -> list[str]:
    """The reference job's flags derived from the registry (``MANAGED_FLAGS``), then its own args.

    ``--starting-offsets-file`` replaces ``--starting-offsets`` when a reset left offsets for the
    next start; the job reads them only when its checkpoint is new (Spark ignores
    startingOffsets otherwise), which is exactly the state a reset leaves.
    """
    if not bootstrap_servers:
        raise UserError(f"job {spec.name}: the Kafka connection {spec.kafka_conn_id!r} has no bootstrap.servers")
    facts = LaunchFacts(bootstrap_servers=bootstrap_servers, kafka_options=tuple(kafka_options),
                        starting_offsets_file=starting_offsets_file)
    own = own_arguments(spec, facts)
    if spec.kind is JobKind.DSTREAM:  # the DStream reference job: the position is the consumer group
        return dstream.job_arguments(spec, bootstrap_servers=bootstrap_servers, kafka_options=kafka_options, own=own)
    args = ["--topics", ",".join(spec.topics), "--bootstrap-servers", bootstrap_servers,
            "--checkpoint", spec.checkpoint]
    if spec.output:
        args += ["--output", spec.output]
    args += ["--sink", spec.sink, "--stop-marker", spec.stop_marker,
             "--fail-on-data-loss", "true" if spec.fail_on_data_loss else "false"]
    if starting_offsets_file:
        args += ["--starting-offsets-file", starting_offsets_file]
    else:
        args += ["--starting-offsets", spec.starting_offsets_default]
    if spec.max_offsets_per_trigger:
        args += ["--max-offsets-per-trigger", str(spec.max_offsets_per_trigger)]
    for option in kafka_options:
        args += ["--kafka-option", option]
    return [*args, *own]


class ReferenceIntegration:
    """See the module doc."""

    reads_starting_offsets_file = True
    stops_on_marker = True

    def launch(self, spec: JobSpec, facts: LaunchFacts) -> Launch:
        return Launch(args=tuple(job_arguments(spec, bootstrap_servers=facts.bootstrap_servers,
                                               starting_offsets_file=facts.starting_offsets_file,
                                               kafka_options=facts.kafka_options)))


    def stop_witness(self, spec: JobSpec) -> None:
        return None   # the checkpoint's files are the only witness


INTEGRATION = ReferenceIntegration()
