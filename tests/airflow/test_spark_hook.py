"""The one place that touches ``SparkSubmitHook``'s private members (airflow_glue/spark.py), on the installed provider.

A provider upgrade that renames ``_connection`` or ``_build_spark_submit_command`` must fail here,
with the adapter's name in the traceback, rather than deep in a submit. Also: the connector jars
for a local master come from ``$AKS_CONNECTOR_JARS`` or Maven, never from the dev stack.
"""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from airflow_kafka_spark.registry.model import JobSpec
from airflow_kafka_spark.runtime import connector, detach, submit

pytestmark = [pytest.mark.airflow]


def _spec(**kw) -> JobSpec:
    base = dict(name="orders", application="/apps/job.py", topics=("orders",), checkpoint="/data/ck/orders",
                backup_root="/data/backups", stop_marker="/data/ck/orders.stop", spark_conn_id="spark_adapter")
    return JobSpec(**{**base, **kw})


def test_adapter_resolves_the_connection_and_builds_the_command(monkeypatch):
    from airflow_kafka_spark.airflow_glue.spark import build_command, resolved_connection, spark_hook, spark_target

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ADAPTER", json.dumps(
        {"conn_type": "spark", "host": "yarn", "extra": {"queue": "streaming", "deploy-mode": "cluster"}}))
    spec = _spec()
    conn = resolved_connection(spark_hook(spec))
    assert (conn["master"], conn["deploy_mode"], conn["queue"]) == ("yarn", "cluster", "streaming")
    argv = build_command(spark_hook(spec, conf={"a.b": "c"}, name="aks-orders"), spec.application)
    assert argv[0] == "spark-submit" and argv[-1] == "/apps/job.py"
    line = " ".join(argv)
    assert "--master yarn" in line and "--queue streaming" in line and "--conf a.b=c" in line

    target = spark_target(spec)
    assert (target.master, target.deploy_mode, target.spark_binary) == ("yarn", "cluster", "spark-submit")
    built = target.build_command(submit.hook_kwargs(spec, args=["--x"], mode=detach.DETACH_YARN), spec.application)
    assert "spark.yarn.submit.waitAppCompletion=false" in " ".join(built) and built[-1] == "--x"


def test_missing_spark_connection_is_one_line():
    from airflow_kafka_spark.airflow_glue.spark import spark_target
    from airflow_kafka_spark.errors import UserError

    with pytest.raises(UserError, match="Spark connection 'spark_nowhere' is not defined"):
        spark_target(_spec(spark_conn_id="spark_nowhere"))


def test_local_connector_comes_from_the_environment_else_maven():
    spec = _spec()
    env = {connector.CONNECTOR_JARS_ENV: " /j/a.jar, /j/b.jar ,"}
    assert connector.local_connector(spec, "local[2]", env) == connector.ConnectorJars(jars=("/j/a.jar", "/j/b.jar"))
    maven = connector.local_connector(spec, "local[*]", {})
    assert maven.jars == () and maven.packages == f"{connector.CONNECTOR_PACKAGE}:{metadata.version('pyspark')}"
    kwargs = submit.hook_kwargs(spec, args=[], mode=detach.DETACH_LOCAL, packages=maven.packages)
    assert kwargs["conf"]["spark.jars.packages"] == maven.packages and "jars" not in kwargs
    declared = _spec(spark_conf={"spark.jars": "/opt/kafka.jar"})
    assert connector.local_connector(declared, "local[2]", env) == connector.ConnectorJars()
    assert connector.local_connector(spec, "yarn", env) == connector.ConnectorJars()


def test_the_core_never_imports_the_dev_stack():
    import subprocess
    import sys

    code = ("import sys, airflow_kafka_spark.runtime.start_stop, airflow_kafka_spark.operators.streaming; "
            "print([m for m in sys.modules if m.split('.')[0] == 'devstack'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_users_jar_is_submitted_as_spark_submit_names_it(monkeypatch):
    """The user's application, main class and own arguments reach spark-submit verbatim (placeholders filled),
    with nothing of the reference contract before them; the user's jars and packages come first and the
    product's additions are appended."""
    from airflow_kafka_spark.airflow_glue.spark import spark_target
    from airflow_kafka_spark.registry.model import Integration
    from airflow_kafka_spark.runtime import integrations

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_ADAPTER", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    spec = _spec(application="/apps/orders-stream.jar", main_class="com.example.orders.OrdersStream",
                 integration=Integration.NONE, application_args=("/apps/app.properties", "--ck={checkpoint}",
                                                                  "{{literal}}", "{topics}"),
                 jars=("/apps/lib/a.jar",), packages=("org.example:lib:1.0",), files=("/apps/app.properties",),
                 spark_conf={"spark.jars.packages": "org.example:other:2.0"})
    launch = integrations.integration_for(spec).launch(spec, integrations.LaunchFacts(bootstrap_servers="b:9092"))
    assert launch.args == ("/apps/app.properties", "--ck=/data/ck/orders", "{literal}", "orders")
    kwargs = submit.hook_kwargs(spec, args=launch.args, jars=["/cache/kafka.jar"], mode=detach.DETACH_LOCAL,
                                packages="org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")
    argv = spark_target(spec).build_command(kwargs, spec.application)
    i = argv.index("/apps/orders-stream.jar")
    assert argv[i + 1:] == ["/apps/app.properties", "--ck=/data/ck/orders", "{literal}", "orders"]
    assert argv[argv.index("--class") + 1] == "com.example.orders.OrdersStream"
    assert argv[argv.index("--jars") + 1] == "/apps/lib/a.jar,/cache/kafka.jar"
    assert argv[argv.index("--files") + 1] == "/apps/app.properties"
    assert argv[argv.index("--packages") + 1] == (
        "org.example:lib:1.0,org.example:other:2.0,org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0")
    assert not any(a.startswith("--topics") or a.startswith("--stop-marker") for a in argv)
    assert "spark.jars.packages" not in " ".join(argv)   # folded into --packages, which spark-submit prefers
