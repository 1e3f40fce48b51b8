"""Shared fixtures: one real Kafka broker per test session (see devstack.broker)."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

from devstack.broker import LocalBroker

_names = itertools.count()

# Every local Spark driver of the suite (spark-submit in client mode, PySpark's gateway, the warm session, the
# drivers Airflow's tasks start: all inherit this environment) is a JVM that lives seconds to a minute, most of
# it starting. C1 alone compiles faster than C1 + C2, and the serial collector needs no GC threads on 2 cores:
# tests/integration/test_stack.py took 41 s with them against 58 s without, alone on an idle machine (over a
# whole run the gain was small: docs/benchmarks.md, "Test and CI wall time"). No test measures Spark's throughput;
# a slower batch only makes the "under load" tests more so. A developer's own SPARK_SUBMIT_OPTS wins.
os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


#: How long past its own timeout a test may run before the backstop below ends the process.
BACKSTOP_GRACE_S = 120


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A backstop behind pytest-timeout: past the test's timeout + 2 min, print every thread's stack and exit.

    Why: the ``signal`` method is one SIGALRM timer, and Airflow sets and clears that same timer around
    its own bounded calls (a DAG file's parse, ``resetdb()``): once cleared, a hung test was never
    failed, and a CI shard waited out its 50-minute limit in ``dag.test()`` with nothing printed of the
    test (session 28). faulthandler's watchdog is a C thread no signal handler can cancel: the shard
    ends at once with the stacks that say where it hung, instead of taking CI's budget."""
    import faulthandler

    marker = item.get_closest_marker("timeout")
    limit = float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)
    if limit > 0:
        faulthandler.dump_traceback_later(limit + BACKSTOP_GRACE_S, exit=True, file=_real_stderr(item.config))
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()


_stderr: list = []


def _real_stderr(config):
    """The shard's own stderr, not the capture's file under fd 2 (the process exits before pytest would print
    a captured line). Through the capture manager's saved descriptor: pytest names no public way to it."""
    if not _stderr:
        capture = getattr(config.pluginmanager.getplugin("capturemanager"), "_global_capturing", None)
        fd = getattr(getattr(capture, "err", None), "targetfd_save", None)
        _stderr.append(os.fdopen(os.dup(fd), "w") if isinstance(fd, int) else sys.stderr)
    return _stderr[0]


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    b = LocalBroker(data_dir=tmp_path_factory.mktemp("kafka"))
    b.start()
    yield b
    b.stop()
    if os.environ.get("AKS_KEEP_BROKER_LOG"):
        print(f"broker log: {b.log_file}")


@pytest.fixture(scope="session")
def connector_jars() -> str:
    """``[kafka_spark] connector_jars`` for drivers the operators start on a local master (the jars devstack
    fetched), as its environment form, which Airflow and ``aks`` both read."""
    from airflow_kafka_spark.runtime.connector import CONNECTOR_JARS_ENV

    if not os.environ.get(CONNECTOR_JARS_ENV):
        from devstack.jars import spark_kafka_jars

        os.environ[CONNECTOR_JARS_ENV] = ",".join(str(j) for j in spark_kafka_jars())
    return os.environ[CONNECTOR_JARS_ENV]


@pytest.fixture(scope="session", autouse=True)
def _stop_shared_spark_session():
    """Stop the warm SparkSession (if a test started one) before the interpreter exits."""
    yield
    import sys

    module = sys.modules.get("tests.support.spark_session")
    if module is not None:
        module.stop()


@pytest.fixture
def topic_name(request):
    """A fresh topic name per test (topics are never shared between tests)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]
    return f"{base}-{next(_names)}"


def pytest_sessionfinish(session, exitstatus):
    while _stderr:   # the backstop's descriptor (_real_stderr), once no test runs
        f = _stderr.pop()
        if f is not sys.stderr:
            f.close()


def pytest_unconfigure(config):
    """Name the threads that would keep the interpreter from exiting after the run, with their stacks.

    Why: Python joins every non-daemon thread at exit, so a thread a test left waiting holds the run open
    after its summary was printed; bin/test's shard timeout then ends it, and these lines say which thread.
    """
    import sys
    import threading
    import traceback

    frames = sys._current_frames()
    # concurrent.futures' own exit hook ends its idle pool workers: they never hold the exit
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()
            and not t.name.startswith("ThreadPoolExecutor-")]
    for t in left:
        stack = "".join(traceback.format_stack(frames[t.ident])) if t.ident in frames else "(no frame)\n"
        sys.stderr.write(f"non-daemon thread still running at exit: {t.name}\n{stack}")
