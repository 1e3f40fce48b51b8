"""Output shared by every ``aks`` subcommand: tables, JSON, the verdict layout, one-line errors.

Why one module: each subcommand (validate, backup, restore, reset, lag, audit) prints the same kinds
of things, and users script against them. Keeping the table layout, the JSON encoding and the
error convention (``error: <one line>`` on stderr, exit 2, never a traceback for a user error) in
one place keeps them identical across commands. It imports nothing heavy, so the CLI stays fast.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from airflow_kafka_spark._util.text import redact_url_secrets
from airflow_kafka_spark.errors import ExitCode, OperationBlocked, Unreachable, UserError, is_unreachable

if TYPE_CHECKING:
    from airflow_kafka_spark.verdict.findings import Finding, Verdict



# --------------------------------------------------------------------------------------------------
# plain values
# --------------------------------------------------------------------------------------------------


def fmt(value: Any) -> str:
    """A cell: integers with thousands separators, None as ``-``, everything else as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return " ".join(str(value).split())


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, right: Iterable[int] = ()) -> str:
    """Columns padded to their widest cell; the last column is never padded (it holds free text).

    ``right`` names column indexes to right-align (numbers read better that way).
    """
    body = [[fmt(c) if not isinstance(c, str) else " ".join(c.split()) for c in row] for row in rows]
    table = [list(headers), *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
    right_cols = set(right)
    lines = []
    for row in table:
        cells = []
        for i, cell in enumerate(row):
            if i == len(row) - 1:
                cells.append(cell)
            elif i in right_cols:
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell.ljust(widths[i]))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def dump_json(obj: Any, *, compact: bool = False) -> str:
    """JSON for machines: stable key order as given, UTF-8 text, unknown objects as strings."""
    if compact:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
    return json.dumps(obj, ensure_ascii=False, indent=2, default=str)


def emit(text: str, stream: IO[str] | None = None) -> None:
    out = stream or sys.stdout
    out.write(text if text.endswith("\n") else text + "\n")
    out.flush()


# --------------------------------------------------------------------------------------------------
# progress of long operations
# --------------------------------------------------------------------------------------------------


class Progress:
    """Step lines on stderr for an operation that takes longer than ``after_s``; nothing for a quick one.

    The core calls the instance with each step ("backing up the checkpoint"); a watcher thread prints
    the current step once ``after_s`` has passed, every later step at once, a "still ..." line every
    ``every_s`` and the total at the end. Used as a context manager around the operation.
    ``enabled=False`` prints nothing: the commands show progress on a terminal (or with ``--progress``),
    so a script reading stderr still gets exactly one ``error:`` line for a failure.
    """

    def __init__(self, what: str, *, after_s: float = 1.0, every_s: float = 10.0, stream: IO[str] | None = None,
                 enabled: bool = True):
        self.what, self.after_s, self.every_s, self.enabled = what, after_s, every_s, enabled
        self.stream = stream
        self._t0 = time.monotonic()
        self._step = "starting"
        self._shown = False
        self._last = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="aks-progress", daemon=True)

    def __call__(self, step: str) -> None:
        with self._lock:
            self._step = step
            if self._shown:
                self._print(step)

    def __enter__(self) -> Progress:
        self._t0 = time.monotonic()
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self.enabled:
            self._thread.join()
        with self._lock:
            if self._shown:
                self._print("failed" if exc[0] is not None else "done")

    def _print(self, text: str) -> None:
        self._last = time.monotonic()
        emit(f"{self.what}: [{self._last - self._t0:.1f}s] {text}", self.stream or sys.stderr)

    def _watch(self) -> None:
        if self._done.wait(self.after_s):
            return
        with self._lock:
            self._shown = True
            self._print(self._step)
        while not self._done.wait(0.5):
            with self._lock:
                if time.monotonic() - self._last >= self.every_s:
                    self._print(f"still {self._step}")


# --------------------------------------------------------------------------------------------------
# errors: one line, exit 2 (bad input), 3 (blocked) or 4 (unreachable)
# --------------------------------------------------------------------------------------------------


def error_line(message: str) -> str:
    return "error: " + " ".join(str(message).split())


def guarded(run: Callable[[], int], *, json_errors: bool = False) -> int:
    """Run a command; a :class:`UserError` becomes one ``error:`` line on stderr and its exit code.

    2 for bad input, 3 when blocked, 4 when Kafka or the storage did not answer (an
    :class:`Unreachable`, or any error caused by a refused/timed-out connection).

    With ``json_errors`` the same error is also printed to stdout as one JSON object, so a script
    reading ``--json`` output always gets JSON. Anything else is a bug: its traceback is printed
    (it is how a bug gets fixed) with every secret this run knows replaced (:func:`bug_report`), exit 1.
    """
    try:
        return run()
    except UserError as exc:
        error = exc
        if not isinstance(exc, (Unreachable, OperationBlocked)) and is_unreachable(exc):
            # raised ``from None`` over a connection failure (the context is kept): exit 4, not 2
            error = Unreachable(str(exc))
    except KeyboardInterrupt:
        emit(error_line("interrupted"), sys.stderr)
        return ExitCode.INTERRUPTED
    except Exception as exc:
        if is_unreachable(exc):
            error = Unreachable(f"storage not reachable: {' '.join(str(exc).split())[:300]}; check the URL, the "
                                "endpoint (--storage-option endpoint_url=...) and that it answers from this host")
        elif not _missing_credentials(exc):
            emit(bug_report(exc), sys.stderr)
            if json_errors:
                emit(dump_json({"error": "internal error (a bug in aks): see the traceback on stderr",
                                "exit_code": int(ExitCode.BUG)}, compact=True))
            return ExitCode.BUG
        else:
            error = UserError(f"no credentials for the object store ({exc}): set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or an instance role) where this runs, or pass "
                              "--storage-option key=... --storage-option secret=...")
    message = redact_url_secrets(str(error))
    if json_errors:
        emit(dump_json({"error": message, "exit_code": error.exit_code}, compact=True))
    emit(error_line(message), sys.stderr)
    return error.exit_code


_known_secrets: set[str] = set()
#: Shorter values are not scrubbed: replacing every "abc" would garble the traceback past reading.
MIN_SECRET_CHARS = 4


def remember_secrets(values: Iterable[str]) -> None:
    """Secret values this run holds (its Kafka config's, its ``KEY=VALUE`` flags'): a bug's
    traceback quotes arguments and messages, and nothing may carry them to a terminal or a log."""
    _known_secrets.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET_CHARS)


def argv_secrets(argv: Iterable[str]) -> list[str]:
    """Values of secret-named ``KEY=VALUE`` arguments (``-X sasl.password=...``,
    ``--storage-option=secret=...``): the key is whatever precedes an ``=``."""
    from airflow_kafka_spark.kafka.secrets import is_secret_key

    found = []
    for arg in argv:
        rest = str(arg)
        while "=" in rest:
            key, rest = rest.split("=", 1)
            if is_secret_key(key):
                found.append(rest)
                break
    return found


def bug_report(exc: BaseException) -> str:
    """The traceback of an unexpected exception, with every known secret and every secret-named
    environment variable's value replaced by ``***``, and credential-bearing URL parameters redacted."""
    import os
    import traceback

    from airflow_kafka_spark.kafka.secrets import REDACTED, secret_values

    text = "".join(traceback.format_exception(exc))
    env = {name.lower().replace("_", "."): value for name, value in os.environ.items()}
    secrets = _known_secrets | {v for v in secret_values(env) if len(v) >= MIN_SECRET_CHARS}
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return (redact_url_secrets(text).rstrip("\n")
            + "\nerror: internal error (a bug in aks, not in your input): please report it with the traceback above")


def _missing_credentials(exc: BaseException) -> bool:
    """botocore's NoCredentialsError / PartialCredentialsError (raised through s3fs), known by name so
    the command line needs no botocore import: a missing setting, not a bug, so one line and exit 2."""
    return any(c.__name__ in ("NoCredentialsError", "PartialCredentialsError") for c in type(exc).__mro__)


# --------------------------------------------------------------------------------------------------
# verdicts
# --------------------------------------------------------------------------------------------------

_COLUMNS = ("checkpoint_offset", "log_start", "log_end")
VERDICT_HEADERS = ("SEVERITY", "CODE", "PARTITION", "CHECKPOINT", "LOG START", "LOG END", "RECORDS", "NUMBERS",
                   "MESSAGE")


def _numbers(numbers: Mapping[str, Any]) -> str:
    """``key=value`` pairs; epoch milliseconds and ids stay unformatted (separators would mislead)."""
    parts = []
    for key, value in numbers.items():
        if key in _COLUMNS or value is None:
            continue
        raw = key.endswith(("_ms", "_id")) and not key.endswith("skew_ms") and not key.startswith("newer")
        parts.append(f"{key}={value if raw else fmt(value)}")
    return " ".join(parts) or "-"


def finding_row(f: Finding) -> list[Any]:
    n = f.numbers
    code = f.code + ("*" if f.inferred else "")
    return [str(f.severity), code, f.where, n.get("checkpoint_offset"), n.get("log_start"), n.get("log_end"),
            f.records.describe() or "-", _numbers(n), f.message]


def render_verdict(verdict: Verdict, *, max_ok_rows: int = 20) -> str:
    """The human layout: one row per finding (partition rows carry their offsets), then the verdict
    line and the fix. Many healthy partitions are folded into one line unless ``max_ok_rows`` < 0."""
    findings = list(verdict.findings)
    ok = [f for f in findings if f.code == "OK"]
    shown = findings if max_ok_rows < 0 or len(ok) <= max_ok_rows else [f for f in findings if f.code != "OK"]
    rows = [finding_row(f) for f in shown]
    if len(shown) < len(findings):
        rows.append(["PASS", "OK", f"{len(ok)} partitions", "-", "-", "-", "-",
                     f"backlog={fmt(sum(int(f.numbers.get('backlog') or 0) for f in ok))}",
                     "aligned (use --all to list them)"])
    lines = []
    subject = f"{verdict.source} {verdict.subject}" if verdict.subject else verdict.source
    lines.append(f"validating {subject}")
    if rows:
        lines.append(render_table(VERDICT_HEADERS, rows, right=(3, 4, 5)))
    if any(f.inferred for f in findings):
        lines.append("* inferred: a heuristic or an unconfirmed version table, see the message")
    last = verdict.headline
    if verdict.fix:
        last += f" · fix: {verdict.fix}"
    lines.append(last)
    return "\n".join(lines)
