"""A long-lived process that runs ``aks`` commands in-process for the hostile corpus, one at a time.

Why: the corpus is ~400 variants × 7 commands. As separate ``aks`` processes that is ~3,000 Python
start-ups (~150 ms each before any work); in one worker the CLI's ``main(argv)`` runs as it would
in its own process — stdout and stderr are captured at the file-descriptor level, so librdkafka's
own C-level logging counts too — at a few milliseconds of overhead per command.

Bounded, so a hostile input cannot take the test run (or the machine) down with it:

* a ``SIGALRM`` timer per command raises :class:`Hang` (a ``BaseException``, so no ``except
  Exception`` in the product swallows it) inside whatever blocks — opening a FIFO, reading
  ``/dev/zero``; the worker then reports the hang with the stack where it stood and exits, and the
  parent starts a fresh one. The parent also kills the worker if no answer comes at all;
* the environment and the working directory are put back after each command (``reset
  --seal-key-file`` sets ``$AKS_SEAL_KEY_FILE`` for its own process), so commands stay independent;
* ``RLIMIT_FSIZE`` (256 MiB, with ``SIGXFSZ`` ignored so a write fails with ``EFBIG``) and
  ``RLIMIT_AS`` (4 GiB) turn "copies ``/dev/zero`` forever" into an error instead of a full disk or
  an OOM kill.

Protocol: one JSON request per line on stdin (``{"argv": [...], "timeout": s}``), one JSON answer
per line on the file descriptor given as ``argv[1]``.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

FSIZE_LIMIT = 256 << 20
AS_LIMIT = 4 << 30
OUTPUT_LIMIT = 1 << 20


class Hang(BaseException):
    """The command did not finish within its time limit."""


def _alarm(signum: int, frame: object) -> None:
    raise Hang()


def _limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, FSIZE_LIMIT))
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    signal.signal(signal.SIGALRM, _alarm)


def _read(f) -> str:
    f.flush()
    f.seek(0)
    text = f.read(OUTPUT_LIMIT).decode("utf-8", "replace")
    f.seek(0)
    f.truncate()
    return text


def run(argv: list[str], timeout: float, out_f, err_f) -> dict:
    """Run ``aks argv`` with fd 1/2 captured; the answer carries rc, output, hang and timing."""
    from airflow_kafka_spark import cli

    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out_f.fileno(), 1)
    os.dup2(err_f.fileno(), 2)
    rc: int | None = None
    hang: str | None = None
    environ, cwd = dict(os.environ), os.getcwd()    # a command may set either "for this process only"
    started = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        rc = cli.main(argv)
    except Hang as exc:     # where it stood: the innermost frames of the product, not of this worker
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith("hostile_worker.py")]
        ours = [f for f in frames if "airflow_kafka_spark" in f.filename][-2:]
        shown = ours + [f for f in frames[-1:] if f not in ours]
        hang = " -> ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in shown)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
    except BaseException:   # a bug: the real process would print this traceback and exit 1
        traceback.print_exc()
        rc = 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd)
    return {"rc": rc, "out": _read(out_f), "err": _read(err_f), "hang": hang,
            "seconds": round(time.monotonic() - started, 3)}


def main() -> None:
    answer_fd = int(sys.argv[1])
    scratch = Path(sys.argv[2])
    scratch.mkdir(parents=True, exist_ok=True)
    _limit()
    import airflow_kafka_spark.cli  # noqa: F401  (import once, before the first timer)

    with open(scratch / "out", "w+b") as out_f, open(scratch / "err", "w+b") as err_f, \
            os.fdopen(answer_fd, "w") as answers:
        for line in sys.stdin:
            request = json.loads(line)
            answer = run(request["argv"], float(request["timeout"]), out_f, err_f)
            answers.write(json.dumps(answer) + "\n")
            answers.flush()
            if answer["hang"]:
                return      # a timer fired mid-operation: start clean rather than trust this process


if __name__ == "__main__":
    main()
