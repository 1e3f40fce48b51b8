"""Integration ``agent`` (the default): the user's job unchanged, the product's JVM agent loaded by configuration.

The agent (``jvm/agent/``, shipped in :mod:`airflow_kafka_spark.agent`; docs/agent.md) is a Spark
plugin, a checkpoint file manager and a query listener. Spark loads all three from ``spark.*``
settings and one jar, so the job's code, arguments and build stay the user's: it watches the stop
marker through Hadoop's FileSystem wherever the driver runs and stops every query between two
batches, and it writes what it saw (application id, Spark version, queries, the first batch's start
offsets, how the stop ended) beside the checkpoint. Which jar depends on the job's Spark line
(Scala 2.12 for 3.5, 2.13 for 4.x): the registry's ``spark_version``, else what the submitting
``spark-submit --version`` says.
"""

from __future__ import annotations

from typing import Any

from airflow_kafka_spark import agent
from airflow_kafka_spark._util.fs import open_location, read_bytes
from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.secrets import is_secret_key
from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime.integrations import Launch, LaunchFacts, own_arguments


class AgentIntegration:
    """See the module doc."""

    reads_starting_offsets_file = False
    stops_on_marker = True

    def launch(self, spec: JobSpec, facts: LaunchFacts) -> Launch:
        version = spec.spark_version or facts.spark_version()
        conf = agent.agent_conf(stop_marker=spec.stop_marker, checkpoint=spec.checkpoint,
                                report_path=agent.report_path(spec.checkpoint), spark_version=version,
                                user_conf=spec.spark_conf, mirror_group=spec.mirror_group,
                                mirror_kafka=mirror_kafka(spec, facts) if spec.mirror_group else None)
        return Launch(args=tuple(own_arguments(spec, facts)), conf=conf)

    def stop_witness(self, spec: JobSpec) -> dict[str, Any] | None:
        """The agent's account of the last stop (how each query ended, how long it took), from its report.

        A second witness beside Spark's files, kept in the stop's result and the audit; the outcome
        itself is judged from the files alone (``runtime.drivers.stop``), so a report that disagrees
        shows up as a disagreement rather than a claim.
        """
        try:
            raw = read_bytes(open_location(agent.report_path(spec.checkpoint), what="agent report"))
            doc = load_json(raw, what="agent report") if raw is not None else None
        except (OSError, UserError, ValueError):
            return None
        stop = doc.get("stop") if isinstance(doc, dict) else None
        if not isinstance(stop, dict):
            return None
        hows = [((q.get("stop") or {}).get("how")) for q in doc.get("queries") or () if isinstance(q, dict)]
        out = {"stopped_on_boundary": stop.get("stopped_on_boundary"), "duration_ms": stop.get("duration_ms"),
               "last_committed_batch": stop.get("last_committed_batch"), "how": [h for h in hows if h],
               "application_id": doc.get("application_id"), "spark_version": doc.get("spark_version")}
        mirror = doc.get("mirror")
        if isinstance(mirror, dict):   # where the shadow group was left (the group itself is Kafka's to say)
            out["mirror"] = {k: mirror.get(k) for k in ("group", "committed_batch", "commits", "errors", "refused",
                                                        "last_problem")}
        dstream = doc.get("dstream") if isinstance(doc.get("dstream"), dict) else None
        if dstream is not None:   # a DStream application: its StreamingContext's graceful stop (docs/agent.md)
            ds_stop = dstream.get("stop") or {}
            last = dstream.get("last_completed_batch") or {}
            out["how"].append(f"dstream_{ds_stop.get('how') or 'not_stopped'}")
            out["dstream"] = {"graceful_stop_returned": ds_stop.get("graceful_stop_returned"),
                              "batches_not_completed": ds_stop.get("batches_not_completed"),
                              "last_completed_batch": last.get("time"),
                              "last_offset_ranges": last.get("offset_ranges"),
                              "processed_end": dstream.get("processed_end")}
        return out


def mirror_kafka(spec: JobSpec, facts: LaunchFacts) -> dict[str, str]:
    """The shadow-group mirror's Kafka client settings for the agent (Java client keys), secrets never.

    The same route as the reference job's Kafka options: the connection's bootstrap servers and its
    non-secret keys (``FORWARDED_KAFKA_KEYS``: security protocol, SASL mechanism...), nothing else,
    since each lands on spark-submit's command line. Credentials reach the agent's admin client the
    way they reach the job's own Kafka source: the JVM's JAAS file (``java.security.auth.login.config``
    in ``spark_conf``, the file shipped with ``files``), or a properties file the job names in its
    ``spark_conf`` as ``spark.aks.agent.mirror.propertiesFile``.
    """
    from airflow_kafka_spark.watch.mirror import check_group_name  # refuses Spark's own group names

    check_group_name(str(spec.mirror_group))
    if not facts.bootstrap_servers:
        raise UserError(f"job {spec.name}: mirror_group {spec.mirror_group} needs the Kafka connection's "
                        f"bootstrap.servers ({spec.kafka_conn_id!r} has none)")
    out = {"bootstrap.servers": facts.bootstrap_servers}
    for option in facts.kafka_options:          # "kafka.<key>=<value>", non-secret by construction
        key, _, value = option.partition("=")
        key = key.removeprefix("kafka.")
        if key and not is_secret_key(key):
            out[key] = value
    return out


INTEGRATION = AgentIntegration()
