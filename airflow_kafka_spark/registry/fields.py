"""Checks of single registry values: each turns a raw YAML value into a typed one or fails with one
line naming the field, the problem and the fix.

Why so picky: YAML reads ``yes`` as a boolean, ``007`` as a number and ``1.10`` as ``1.1``, and a
``${VAR}`` expansion is always a string; each check accepts exactly what an author means and says
so otherwise. Secrets never belong in the registry: keys that look like secrets in ``spark_conf`` or
``application_args`` are rejected (credentials come from the Airflow connections at submit time).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any

from airflow_kafka_spark._util.jsonfile import load_json
from airflow_kafka_spark.kafka.secrets import is_secret_key
from airflow_kafka_spark.registry.context import Context, kind, show
from airflow_kafka_spark.registry.model import BackupRetention, HealthGate, Integration, JobKind

# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Airflow connection ids; anything else (a URI with user:password@host) is not an id.
_CONN_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")
_GROUP_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")

RETENTION_KEYS = ("keep_last", "max_age_days")
HEALTH_GATE_KEYS = ("min_batches", "timeout_s", "idle_pass_s")

# Flags of the reference job that the operator derives from registry fields (or, for the
# bootstrap servers, from the Kafka connection). Setting them again in application_args would
# make two sources of truth that silently disagree.
MANAGED_FLAGS = {
    "--topics": "topics",
    "--bootstrap-servers": "the Kafka connection (kafka_conn_id)",
    "--checkpoint": "checkpoint",
    "--output": "output",
    "--starting-offsets": "starting_offsets_default",
    "--starting-offsets-file": "starting_offsets_default (reset plans are passed by the operator)",
    "--fail-on-data-loss": "fail_on_data_loss",
    "--max-offsets-per-trigger": "max_offsets_per_trigger",
    "--sink": "sink",
    "--stop-marker": "stop_marker",
}


def check_keys(ctx: Context, where: str, mapping: dict, allowed: tuple[str, ...] | list[str],
               extra_hint: str = "") -> None:
    """Every key of ``mapping`` is in ``allowed``; an unknown one fails with a "did you mean"."""
    for key in mapping:
        if key in allowed:
            continue
        if not isinstance(key, str):
            ctx.fail(where, f"has a non-text key {show(key)}", "keys are names like 'checkpoint'")
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = extra_hint or (f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(allowed)}")
        ctx.fail(where, f"unknown key {key!r}", hint)


def str_list(ctx: Context, where: str, value: Any) -> list[str]:
    """A list of strings (a single string counts as a list of one)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        ctx.fail(where, f"must be a list of strings, got {kind(value)}", "write [a, b]")
    for item in value:
        if not isinstance(item, str):
            ctx.fail(where, f"{show(item)} is {kind(item)}, not a string",
                     "quote it (YAML reads yes/no/on/off as booleans and 007 as a number)")
    return list(value)


def topics(ctx: Context, where: str, value: Any) -> list[str]:
    """A non-empty list of distinct, legal Kafka topic names."""
    names = str_list(ctx, where, value)
    if not names:
        ctx.fail(where, "is empty", "list at least one topic")
    for t in names:
        if not _TOPIC.fullmatch(t) or t in (".", ".."):
            ctx.fail(where, f"{t!r} is not a legal Kafka topic name",
                     "use letters, digits, '.', '_' and '-' (at most 249)")
    if len(set(names)) != len(names):
        ctx.fail(where, "lists a topic twice", "remove the duplicate")
    return names


#: Values the product knows and a job's own arguments may ask for: ``{checkpoint}`` in
#: ``application_args`` becomes the registry's checkpoint at submit (``{{`` and ``}}`` are literal braces).
PLACEHOLDERS = ("name", "checkpoint", "bootstrap_servers", "topics", "output", "stop_marker")
_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*)\}(?!\})")
_JAVA_CLASS = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*(\.[A-Za-z_$][A-Za-z0-9_$]*)*")
_MAVEN_COORD = re.compile(r"[A-Za-z0-9_.-]+:[A-Za-z0-9_.-]+:[A-Za-z0-9_.+-]+")
_SPARK_LINE = re.compile(r"[1-9][0-9]*\.[0-9]+(\.[0-9]+)?")


def arg_pieces(arg: str) -> list[tuple[str, str]]:
    """One argument of ``application_args`` read once, for the registry's check and the submit's fill alike.

    Pieces: ``("text", s)``; ``("name", n)`` for a ``{n}``; ``("brace", c)`` for a doubled brace, which
    stands for one; ``("lone", c)`` for a single brace that is no placeholder (kept as it is)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(arg):
        c = arg[i]
        if arg.startswith(("{{", "}}"), i):
            out.append(("brace", c))
            i += 2
        elif c == "{" and (m := _PLACEHOLDER.match(arg, i)):
            out.append(("name", m.group(1)))
            i = m.end()
        elif c in "{}":
            out.append(("lone", c))
            i += 1
        else:
            j = min((k for k in (arg.find("{", i), arg.find("}", i)) if k >= 0), default=len(arg))
            out.append(("text", arg[i:j]))
            i = j
    return out


def placeholders_in(arg: str) -> list[str]:
    """The ``{name}`` placeholders of one argument (``{{x}}`` is a literal ``{x}``, not a placeholder)."""
    return [v for kind, v in arg_pieces(arg) if kind == "name"]


def application_args(ctx: Context, where: str, value: Any,
                     integration: Integration = Integration.REFERENCE) -> tuple[str, ...]:
    """The job's own arguments, verbatim but for placeholders (:data:`PLACEHOLDERS`).

    Only the reference contract owns flags (``MANAGED_FLAGS``); a user's job may name its own
    ``--checkpoint`` freely, and usually should write ``{checkpoint}`` so that one value lives in
    the registry.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        ctx.fail(where, f"must be a list, got {kind(value)}", "write [--flag, value, ...]")
    args = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            ctx.fail(where, f"{show(item)} is {kind(item)}, not a string", "quote it")
        args.append(str(item))
    for arg in args:
        kinds = {kind for kind, _ in arg_pieces(arg)}
        if {"lone", "brace"} <= kinds:   # raw JSON: its "}}" would reach the job as "}"
            ctx.fail(where, f"{arg!r} has single braces and doubled ones, and a doubled brace stands for one "
                     "literal brace, so the job would get it changed",
                     "write every literal brace twice ({{ and }}), or keep the JSON in a file the job reads")
        for name in placeholders_in(arg):
            if name not in PLACEHOLDERS:
                close = difflib.get_close_matches(name, PLACEHOLDERS, n=1)
                ctx.fail(where, f"{arg!r} has the unknown placeholder {{{name}}}",
                         (f"did you mean {{{close[0]}}}? " if close else "")
                         + f"known: {', '.join('{' + p + '}' for p in PLACEHOLDERS)}; "
                         "write {{ }} for a literal brace")
        flag = arg.split("=", 1)[0]
        if integration is Integration.REFERENCE and flag in MANAGED_FLAGS:
            ctx.fail(where, f"sets {flag}, which comes from {MANAGED_FLAGS[flag]}",
                     "remove it from application_args; the operator passes it")
        key = flag.lstrip("-")
        if ("=" in arg or arg.startswith("-")) and is_secret_key(key):
            ctx.fail(where, f"{flag!r} looks like a secret", "secrets belong in the Airflow connection, "
                     "not in the registry (it holds connection ids only)")
    return tuple(args)


def main_class(ctx: Context, where: str, value: Any, application: str) -> str | None:
    """A JAR's entry point, as ``spark-submit --class`` takes it; only a JAR has one."""
    if value in (None, ""):
        return None
    if not isinstance(value, str) or not _JAVA_CLASS.fullmatch(value):
        ctx.fail(where, f"{show(value)} is not a Java class name",
                 "write the fully qualified name, e.g. com.example.Main")
    if not application.lower().endswith(".jar"):
        ctx.fail(where, "applies only to a .jar application", "remove it (a Python application has no main class)")
    return value


def packages(ctx: Context, where: str, value: Any) -> tuple[str, ...]:
    """Maven coordinates for ``--packages`` (``group:artifact:version``)."""
    coords = str_list(ctx, where, value) if value is not None else []
    for c in coords:
        if not _MAVEN_COORD.fullmatch(c):
            ctx.fail(where, f"{c!r} is not a Maven coordinate", "write group:artifact:version")
    return tuple(coords)


def spark_line(ctx: Context, where: str, value: Any) -> str | None:
    """The Spark release line the job runs on (``"3.5"``, ``"4.2"``); it picks the agent's build."""
    if value in (None, ""):
        return None
    if isinstance(value, float):
        ctx.fail(where, f"{value!r} was read as a number", 'quote it: "3.5"')
    if not isinstance(value, str) or not _SPARK_LINE.fullmatch(value):
        ctx.fail(where, f"{show(value)} is not a Spark version", 'write "3.5" or "4.2"')
    return value


def spark_conf(ctx: Context, where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        ctx.fail(where, f"must be a mapping of spark.* keys, got {kind(value)}", "write {spark.x: value}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            ctx.fail(where, f"key {show(key)} does not start with 'spark.'",
                     "Spark ignores other keys; fix the key (a typo?)")
        if is_secret_key(key):
            ctx.fail(where, f"{key!r} looks like a secret",
                     "put credentials in the Spark or Kafka connection, "
                     "not in the registry (it holds connection ids only)")
        if isinstance(val, bool):
            out[key] = "true" if val else "false"   # str(True) is 'True', which Spark does not accept
        elif isinstance(val, str | int | float):
            out[key] = str(val)
        else:
            ctx.fail(f"{where}.{key}", f"must be a single value, got {kind(val)}",
                     "write a string or number")
    return out


def conn_id(ctx: Context, where: str, value: Any) -> str:
    if not isinstance(value, str) or not _CONN_ID.fullmatch(value):
        ctx.fail(where, f"{show(value)} is not an Airflow connection id",
                 "write the id only (letters, digits, '_', '.', '-'); the connection holds hosts and secrets")
    return value


def group(ctx: Context, where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _GROUP_ID.fullmatch(value):
        ctx.fail(where, f"{show(value)} is not a usable consumer group id",
                 "use letters, digits, '.', '_' and '-'")
    return value


def choice(ctx: Context, where: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices or not isinstance(value, str):
        ctx.fail(where, f"{show(value)} is not one of {', '.join(choices)}",
                 f"use one of {', '.join(choices)}")
    return value


def boolean(ctx: Context, where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"   # a ${VAR} expansion is always a string
    ctx.fail(where, f"{show(value)} is not true or false", "write true or false")


def integer(ctx: Context, where: str, value: Any, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)            # from a ${VAR} expansion
    if isinstance(value, bool) or not isinstance(value, int):
        ctx.fail(where, f"{show(value)} is not a whole number", "write an integer (or remove the key)")
    if value < minimum:
        ctx.fail(where, f"{value} is below {minimum}", f"use a value >= {minimum}")
    return value


def number(ctx: Context, where: str, value: Any, default: float | None, *,
            positive: bool = False) -> float | None:
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = float(value)      # from a ${VAR} expansion
        except ValueError:
            ctx.fail(where, f"{value!r} is not a number", "write a number of seconds (or remove the key)")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        ctx.fail(where, f"{show(value)} is not a number", "write a number (or remove the key)")
    if value < 0 or (positive and value == 0):
        ctx.fail(where, f"{value} must be {'> 0' if positive else '>= 0'}", "use a positive number")
    return float(value)


def compat(ctx: Context, where: str, value: Any) -> str:
    if isinstance(value, float):
        ctx.fail(where, f"{value!r} was read as a number", "quote it (\"1.10\" would otherwise become 1.1)")
    if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
        ctx.fail(where, f"{show(value)} is not a version string", "write a quoted string such as \"1\"")
    return str(value)


def starting_offsets(ctx: Context, where: str, value: Any, topics: list[str]) -> str:
    if value in ("earliest", "latest"):
        return value
    if isinstance(value, str):
        try:
            parsed = load_json(value, what=where)
        except ValueError:
            ctx.fail(where, f"{show(value)} is neither earliest, latest nor Spark offsets JSON",
                     "write earliest, latest or {\"topic\": {\"0\": 42}}")
    else:
        parsed = value
    if not isinstance(parsed, dict) or not parsed:
        ctx.fail(where, f"{show(value)} is not earliest, latest or a topic -> partition -> offset mapping",
                 "write earliest, latest or {topic: {\"0\": 42}}")
    for topic, parts in parsed.items():
        if topic not in topics:
            ctx.fail(where, f"names topic {topic!r}, which the job does not read",
                     f"use only {', '.join(topics)}")
        if not isinstance(parts, dict) or not all(
                str(p).isdigit() and isinstance(o, int) and not isinstance(o, bool) and o >= -2
                for p, o in parts.items()):
            ctx.fail(where, f"offsets for {topic!r} must map partition numbers to offsets "
                     "(-2 earliest, -1 latest)",
                     "write {\"0\": 42, \"1\": -2}")
    return json.dumps({t: {str(p): o for p, o in parts.items()} for t, parts in parsed.items()},
                      sort_keys=True)


def _settings(ctx: Context, where: str, value: Any, keys: tuple[str, ...], example: str) -> None:
    """A settings block (retention, health gate) must be a mapping of known keys; else one line naming ``example``."""
    if not isinstance(value, dict):
        ctx.fail(where, f"must be a mapping, got {kind(value)}", example)
    check_keys(ctx, where, value, keys)


def retention(ctx: Context, where: str, value: Any) -> BackupRetention:
    if value is None:
        return BackupRetention()
    _settings(ctx, where, value, RETENTION_KEYS, "write {keep_last: 5, max_age_days: 30}")
    keep = integer(ctx, f"{where}.keep_last", value.get("keep_last", BackupRetention.keep_last), minimum=1)
    age = number(ctx, f"{where}.max_age_days", value["max_age_days"], None, positive=True) \
        if "max_age_days" in value else BackupRetention.max_age_days
    return BackupRetention(keep_last=keep if keep is not None else BackupRetention.keep_last,
                           max_age_days=age)


def health_gate(ctx: Context, where: str, value: Any) -> HealthGate:
    if value is None:
        return HealthGate()
    _settings(ctx, where, value, HEALTH_GATE_KEYS, "write {min_batches: 1, timeout_s: 600}")
    batches = integer(ctx, f"{where}.min_batches", value.get("min_batches", HealthGate.min_batches), minimum=1)
    timeout = number(ctx, f"{where}.timeout_s", value.get("timeout_s"), HealthGate.timeout_s, positive=True)
    idle: float | None = HealthGate.idle_pass_s
    if "idle_pass_s" in value:
        idle = number(ctx, f"{where}.idle_pass_s", value["idle_pass_s"], None, positive=True)
    return HealthGate(min_batches=batches or HealthGate.min_batches,
                      timeout_s=timeout if timeout is not None else HealthGate.timeout_s, idle_pass_s=idle)


#: The receiver-based Kafka input (and its write-ahead log): gone since Spark 3.0.
_RECEIVER_MARKS = ("spark-streaming-kafka-0-8", "spark.streaming.receiver.writeAheadLog.enable")


def job_kind(ctx: Context, job: str, v: dict[str, Any]) -> tuple[JobKind, str | None]:
    """The job's kind and, for ``dstream``, its consumer group; a receiver-based job is refused."""
    texts = [str(v.get("kind", "")), str(v.get("application", "")), json.dumps(v.get("spark_conf") or {}),
             json.dumps(v.get("application_args") or [])]
    if v.get("kind") == "receiver" or any(m in t for t in texts for m in _RECEIVER_MARKS):
        ctx.fail(job, "is a receiver-based Kafka job (spark-streaming-kafka-0-8 / receiver write-ahead log), "
                      "removed in Spark 3.0 and not managed here",
                 "port it to the direct API (spark-streaming-kafka-0-10, kind: dstream with its group) or to "
                 "Structured Streaming")
    kind_ = JobKind(choice(ctx, f"{job}.kind", v.get("kind", JobKind.STRUCTURED.value),
                           tuple(k.value for k in JobKind)))
    group_id = group(ctx, f"{job}.group", v.get("group"))
    if kind_ is JobKind.DSTREAM and group_id is None:
        ctx.fail(f"{job}.group", "is required for kind dstream",
                 "name the consumer group the job commits its offset ranges to (its group.id)")
    if kind_ is not JobKind.DSTREAM:
        for key in ("group", "dstream_checkpoint"):
            if v.get(key) not in (None, ""):
                ctx.fail(f"{job}.{key}", "applies only to kind: dstream", "remove it or set kind: dstream")
    return kind_, group_id


def integration(ctx: Context, job: str, v: dict[str, Any], kind_: JobKind) -> Integration:
    """How the product reaches the job (:class:`Integration`); the agent by default, for both kinds.

    A Structured Streaming job's queries are stopped between batches by the agent; a DStream job's
    StreamingContext is stopped gracefully by it (``stop(stopSparkContext, stopGracefully)``), and the
    agent reports every batch's Kafka ranges, so the replay a restart announces is exact
    (docs/agent.md, DStream). The bundled DStream reference job declares ``integration: reference``.
    """
    chosen = Integration(choice(ctx, f"{job}.integration", v.get("integration", Integration.AGENT.value),
                                tuple(i.value for i in Integration)))
    if chosen is Integration.NONE and v.get("compatibility_probe") in (True, "true"):
        # The probe needs either the reference contract's --aks-probe or the agent's sink swap (docs/probe.md).
        ctx.fail(f"{job}.compatibility_probe", "needs integration agent (the sink swap) or reference (--aks-probe), "
                 "not none", "remove compatibility_probe (auto then follows compatibility_version) or use "
                 "integration: agent")
    if chosen is Integration.REFERENCE and v.get("sink") == "batch-keyed":
        ctx.fail(f"{job}.sink", "batch-keyed is a sink of your own foreachBatch; the reference job's --sink has no "
                 "such kind", "use sink: idempotent, append or parquet with integration: reference")
    return chosen
