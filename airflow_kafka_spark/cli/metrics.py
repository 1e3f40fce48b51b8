"""``aks serve-metrics``: a Prometheus endpoint for every job of the registry, without Airflow running.

Why a command of its own: the platform's Prometheus already scrapes kafka-lag-exporter or Burrow
exporters, and Structured Streaming jobs are invisible to them (S23). This serves the same metric
names from the checkpoint (:mod:`airflow_kafka_spark.watch.metrics`) on ``/metrics``, computed at
scrape time through the same ``observe`` call as ``aks lag`` (so the numbers agree), with a short
cache (``--min-interval``) so several scrapers do not multiply the Kafka requests.

Stdlib ``http.server`` only, and nothing heavy is imported before the first scrape: the command
starts in well under a second on a host without Airflow. The listening line goes to stdout
(``serving http://HOST:PORT/metrics``; ``--port 0`` picks a free port and the line says which).
Errors of one job become ``aks_job_up 0`` and one log line on stderr with the error text only:
Kafka settings and credentials are never printed or served.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from airflow_kafka_spark.cli._args import Command, add_kafka_arguments, positive_float
from airflow_kafka_spark.cli._job import add_registry_argument, kafka_config_for, kafka_given, load_registry
from airflow_kafka_spark.errors import ExitCode

if TYPE_CHECKING:  # http.server is imported when serving, not on every `aks` start
    from http.server import BaseHTTPRequestHandler


def _arguments(p: argparse.ArgumentParser) -> None:
    add_registry_argument(p)
    p.add_argument("--job", metavar="NAME", action="append", default=[],
                   help="serve only this job (repeatable; default every job of the registry)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=8000,
                   help="port (default 8000, kafka-lag-exporter's; 0 picks a free one)")
    p.add_argument("--min-interval", metavar="SECONDS", type=positive_float, default=5.0,
                   help="serve the previous result to scrapes closer than this (default 5)")
    p.add_argument("--cluster-name", metavar="NAME",
                   help="value of the cluster_name label (default: the Kafka cluster id)")
    add_kafka_arguments(p)


class MetricsCache:
    """Computes the registry's metrics at most once per ``min_interval``; one computation at a time.

    Keeps each job's broker samples between computations, so the status gets its trend the way
    ``aks lag --watch`` does.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.registry = load_registry(args)
        for name in args.job:
            self.registry.get(name)          # an unknown --job is a usage error now, not at the first scrape
        # Kafka settings on the command line: read (and warned about) once, and wrong ones fail now;
        # else each job's Airflow connection, read at every computation (a rotated secret is picked up).
        self.cli_kafka = kafka_config_for(args, None) if kafka_given(args) else None
        self.history: dict[str, list[Any]] = {}
        self.lock = threading.Lock()
        self.text: str | None = None
        self.at = 0.0

    def _compute(self) -> str:
        from airflow_kafka_spark.watch.metrics import SCRAPE_SECONDS, MetricSample, prometheus_text, registry_metrics

        try:
            self.registry = load_registry(self.args)    # pick up added jobs; keep the last good registry on error
        except Exception as exc:
            print(f"warning: registry not reloaded, serving the previous one: {exc}", file=sys.stderr, flush=True)
        t0 = time.monotonic()
        samples = registry_metrics(self.registry, lambda spec: self.cli_kafka or kafka_config_for(self.args, spec),
                                   cluster_name=self.args.cluster_name, history=self.history,
                                   jobs=self.args.job or None, timeout=self.args.timeout)
        samples.append(MetricSample(SCRAPE_SECONDS, (), round(time.monotonic() - t0, 3)))
        return prometheus_text(samples)

    def get(self) -> str:
        with self.lock:
            if self.text is None or time.monotonic() - self.at >= self.args.min_interval:
                self.text = self._compute()
                self.at = time.monotonic()
            return self.text


def _handler(cache: MetricsCache) -> type[BaseHTTPRequestHandler]:
    from http.server import BaseHTTPRequestHandler

    from airflow_kafka_spark.watch.metrics import CONTENT_TYPE

    class Handler(BaseHTTPRequestHandler):
        server_version = "aks-metrics"

        def _send(self, code: int, body: str, content_type: str = "text/plain; charset=utf-8") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    self._send(200, cache.get(), CONTENT_TYPE)
                except Exception as exc:   # one line, no traceback, no settings
                    msg = " ".join(str(exc).split()) or type(exc).__name__
                    print(f"error: metrics not computed: {msg}", file=sys.stderr, flush=True)
                    self._send(500, f"error: metrics not computed: {msg}\n")
            elif path in ("/", "/healthz"):
                self._send(200, "aks serve-metrics: scrape /metrics\n")
            else:
                self._send(404, "not found: scrape /metrics\n")

        do_HEAD = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


def _serve(args: argparse.Namespace) -> int:
    import signal
    from http.server import ThreadingHTTPServer

    from airflow_kafka_spark.errors import UserError

    cache = MetricsCache(args)
    try:
        server = ThreadingHTTPServer((args.host, args.port), _handler(cache))
    except OSError as exc:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}; "
                        "choose another --port (0 picks a free one)") from None
    server.daemon_threads = True
    host, port = server.server_address[:2]
    jobs = ", ".join(args.job) if args.job else f"{len(cache.registry)} job(s) of {cache.registry.path}"
    print(f"serving http://{host}:{port}/metrics ({jobs}); Ctrl-C ends", flush=True)

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return ExitCode.OK


COMMANDS = (
    Command("serve-metrics", "serve lag, status and headroom of the registry's jobs on /metrics (Prometheus)",
            _arguments, _serve),
)
