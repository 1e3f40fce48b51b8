"""librdkafka plumbing behind :class:`~airflow_kafka_spark.kafka.view.KafkaView`: quiet logs, error codes.

librdkafka retries forever and logs every refused connection; these helpers turn that into one
scrubbed reason for the single :class:`~airflow_kafka_spark.errors.UserError` line a user sees.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Self

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from airflow_kafka_spark.errors import Unreachable, UserError
from airflow_kafka_spark.kafka.secrets import bootstrap_servers_of, redact, scrub

# librdkafka error codes that mean "could not talk to the cluster at all" rather than "the cluster
# answered no". They become the single unreachable-cluster message.
CONNECTIVITY_CODES = {
    KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE, KafkaError._SSL, KafkaError._AUTHENTICATION, KafkaError._WAIT_COORD,
}
# Per-partition answers worth a retry within the deadline (fresh topic, leader election).
RETRIABLE_CODES = {
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REPLICA_NOT_AVAILABLE, KafkaError.UNKNOWN_LEADER_EPOCH,
    KafkaError.FENCED_LEADER_EPOCH, KafkaError.OFFSET_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
}
#: The group id librdkafka wants of the offset lister and the record lookups (nothing is committed). Its value
#: stays as brokers' ACLs know it; ``PROBE_GROUP_ID`` is its old name.
LOOKUP_GROUP_ID = PROBE_GROUP_ID = "airflow-kafka-spark-probe"
FIX_CONNECTION = ("check bootstrap.servers in the Kafka connection, that the brokers are up and "
                   "reachable from this host, and the security.protocol/SASL/SSL settings")


class RdkafkaLog:
    """Receives librdkafka's log lines (``logger=`` of the clients) and keeps them quiet.

    Without it librdkafka writes every refused connection to stderr, about ten lines a second for
    an unreachable cluster; the user gets one :class:`UserError` line instead. Each distinct line is
    logged once at INFO (if it was a warning or worse), repeats and chatter at DEBUG, secrets
    scrubbed.
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = config
        self._seen: set[str] = set()
        self._log = logging.getLogger("airflow_kafka_spark.kafka.view.librdkafka")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        try:
            text = scrub(fmt % args if args else fmt, self._config)
        except Exception:  # never let logging break a client callback
            return
        key = re.sub(r"\d+", "#", text)
        loud = level >= logging.WARNING and "CONFWARN" not in text and key not in self._seen
        if len(self._seen) < 1000:
            self._seen.add(key)
        self._log.log(logging.INFO if loud else logging.DEBUG, "%s", text)


def with_log(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` for a confluent-kafka client, its librdkafka log lines routed to Python logging.

    Every client is built through this (or with a :class:`RdkafkaLog` as ``logger``): librdkafka's
    own default writes ``%4|<time>|GETPID|...`` lines straight to the terminal (fd 2), past any
    logging configuration. A ``logger`` the caller set is kept.
    """
    out = dict(conf)
    if out.get("logger") is None:
        out["logger"] = RdkafkaLog(out)
    return out


class ClientErrors:
    """Collects client-level errors (``error_cb``): the reason to give when a request times out."""

    def __init__(self, config: Mapping[str, Any], user_cb: Callable[[KafkaError], None] | None) -> None:
        self._config = config
        self._user_cb = user_cb
        self.items: list[tuple[float, KafkaError]] = []

    def __call__(self, err: KafkaError) -> None:
        self.items.append((time.monotonic(), err))
        del self.items[:-50]
        if self._user_cb is not None:
            self._user_cb(err)

    def since(self, t0: float) -> list[KafkaError]:
        return [e for t, e in self.items if t >= t0]

    def reason(self, t0: float) -> str:
        """The most telling error since ``t0``: a transport error beats "all brokers down"."""
        errs = self.since(t0)
        for wanted in (KafkaError._AUTHENTICATION, KafkaError._SSL, KafkaError._RESOLVE,
                       KafkaError._TRANSPORT):
            for e in reversed(errs):
                if e.code() == wanted:
                    return clean(e.str(), self._config)
        return clean(errs[-1].str(), self._config) if errs else ""


def clean(text: str, config: Mapping[str, Any]) -> str:
    """librdkafka text → one scrubbed line without the ``host:port/bootstrap:`` prefix noise."""
    text = scrub(" ".join(str(text).split()), config)
    return re.sub(r"^\S+/(bootstrap|\d+): ", "", text)


@dataclass(frozen=True)
class ConfigValue:
    value: str


def err_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class KafkaClient:
    """One lazily created AdminClient, a deadline on every request, and errors as one line.

    The base of :class:`~airflow_kafka_spark.kafka.view.KafkaView`; the request kinds (metadata and
    offsets, consumer groups, single records) are built on these internals in their own modules.
    ``timeout`` bounds each public call (seconds), connection set-up included.
    """

    def __init__(self, config: dict, *, timeout: float = 10.0) -> None:
        if not isinstance(config, Mapping):
            raise UserError("Kafka config must be a dict of librdkafka settings, "
                            f"got {type(config).__name__}")
        self.config: dict[str, Any] = dict(config)
        self.timeout = float(timeout)
        self.bootstrap_servers = bootstrap_servers_of(self.config)
        if not self.bootstrap_servers:
            raise UserError("Kafka config has no bootstrap.servers; set it in the Kafka connection extra, "
                            "e.g. {\"bootstrap.servers\": \"broker1:9092\"}")
        self._errors = ClientErrors(self.config, self.config.get("error_cb"))
        self._logger = self.config.get("logger") or RdkafkaLog(self.config)
        self._admin: AdminClient | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the AdminClient (confluent-kafka has no explicit close; destruction frees it)."""
        if self._admin is not None:
            with contextlib.suppress(Exception):  # best effort: serve pending log lines
                self._admin.poll(0)
            self._admin = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact(self.config)!r}, timeout={self.timeout})"

    # -- internals: admin requests ------------------------------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            conf = dict(self.config)
            conf["error_cb"] = self._errors
            conf["logger"] = self._logger
            self._admin = self._construct(AdminClient, conf, "Kafka admin client")
        return self._admin

    def _construct(self, cls: Any, conf: dict[str, Any], what: str) -> Any:
        try:
            return cls(conf)
        except (KafkaException, ValueError, TypeError) as exc:
            err = err_of(exc)
            text = err.str() if err is not None else str(exc)
            raise UserError(f"invalid Kafka client configuration for {self.bootstrap_servers} ({what}): "
                            f"{clean(text, self.config)}; fix the Kafka connection extra") from None

    def _call(self, what: str, submit: Callable[[AdminClient, float], Any], deadline: float) -> Any:
        """Submit one admin request with the time left as librdkafka's ``request_timeout``."""
        remaining = max(deadline - time.monotonic(), 0.2)
        try:
            return submit(self._admin_client(), remaining)
        except KafkaException as exc:
            raise self._user_error(exc, what) from None

    def _wait(self, futures: Iterable[concurrent.futures.Future], deadline: float, what: str) -> None:
        """Wait for futures while serving the client's callbacks (logs, errors).

        librdkafka times requests out itself (``request_timeout``); the extra second here only
        guards against a future that never resolves. Authentication failures end the wait at once:
        retrying cannot fix a wrong password.
        """
        # One future waited on at a time: ``concurrent.futures.wait`` on all of them installs a
        # waiter in each, every 50 ms, which made 10,000 list_offsets futures (5,000 partitions ×
        # earliest/latest) cost seconds. ``done()`` checks are cheap; the futures finish together.
        pending = [f for f in futures if not f.done()]
        t0 = deadline - self.timeout
        while pending:
            admin = self._admin
            if admin is not None:
                admin.poll(0)
            for err in self._errors.since(t0):
                if err.code() == KafkaError._AUTHENTICATION:
                    raise self._auth_error(err, what)
            remaining = deadline - time.monotonic()
            if remaining < -1.0:
                raise self._unreachable(what, t0)
            concurrent.futures.wait(pending[-1:], timeout=min(0.05, max(remaining + 1.0, 0.01)))
            pending = [f for f in pending if not f.done()]
        if self._admin is not None:
            self._admin.poll(0)

    def _result(self, fut: concurrent.futures.Future, what: str, deadline: float, *,
                raw: bool = False) -> Any:
        """The future's value; connectivity failures become the unreachable :class:`UserError`.

        With ``raw`` other Kafka errors are re-raised as ``KafkaException`` for the caller to
        interpret (e.g. unknown topic = missing, not failure).
        """
        self._wait([fut], deadline, what)
        try:
            return fut.result(0)
        except KafkaException as exc:
            err = err_of(exc)
            if err is not None and err.code() in CONNECTIVITY_CODES:
                raise self._user_error(exc, what) from None
            if raw:
                raise
            raise self._user_error(exc, what) from None

    def _user_error(self, exc: BaseException, what: str) -> UserError:
        err = err_of(exc)
        t0 = time.monotonic() - self.timeout - 2
        if err is not None and err.code() in CONNECTIVITY_CODES:
            if err.code() == KafkaError._AUTHENTICATION:
                return self._auth_error(err, what)
            return self._unreachable(what, t0, clean(err.str(), self.config))
        text = clean(err.str() if err is not None else str(exc), self.config)
        if err is not None and text.rstrip().endswith(":"):   # "ConsumerGroupDescribe: " says nothing
            text = f"{text.rstrip()} {err.name()}"
        if err is not None and err.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED,
                                              KafkaError.GROUP_AUTHORIZATION_FAILED,
                                              KafkaError.CLUSTER_AUTHORIZATION_FAILED):
            return UserError(f"Kafka at {self.bootstrap_servers} refused to {what}: {text}; grant the "
                             "connection's principal DESCRIBE (and READ for groups) on the resource")
        return UserError(f"Kafka at {self.bootstrap_servers} could not {what}: {text}")

    def _auth_error(self, err: KafkaError, what: str) -> UserError:
        """Fail fast: retrying cannot fix a wrong password or a SASL client on a plaintext listener."""
        return UserError(f"Kafka at {self.bootstrap_servers} rejected the connection's authentication "
                         f"({what}): {clean(err.str(), self.config)}; check security.protocol, "
                         "sasl.mechanism, sasl.username and the password in the Kafka connection")

    def _unreachable(self, what: str, t0: float, fallback: str = "") -> Unreachable:
        """The one-line error for a request Kafka did not answer; the AdminClient is dropped with it.

        Why dropped: librdkafka (2.x) aborts the whole process (``rd_kafka_enq_once_del_source_return:
        Assertion eonce->refcnt > 0``) when an AdminClient with a request abandoned here is used for
        another one, which every loop over one view did (the DStream health gate, ``aks lag --watch``,
        the mirror listener inside the Spark driver, a metrics scrape of several jobs) while a broker
        restarted. A fresh client is made on the next call (``tests/airflow/test_dstream_gate.py``).
        """
        self._admin = None
        reason = self._errors.reason(t0) or fallback or "no answer"
        return Unreachable(f"Kafka at {self.bootstrap_servers} is not reachable ({what} got no answer within "
                         f"{self.timeout:g}s: {reason}); {FIX_CONNECTION}")
