"""Run the hostile corpus: build each variant, run every command in the worker, judge each run.

Why here and not in the test module: the coordinator (and ``python -m tests.support.hostile_harness``
against a running broker) can re-run the corpus, or one variant, and read the per-command failure
list without pytest. The judgement is the acceptance of issue 17: no traceback, no hang, exit code
in {0, 2, 3} with one stderr line when not 0, nothing written outside the command's own folders,
the checkpoint byte-identical unless a real restore succeeded, and no PASS where one is forbidden.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.hostile import DRY_RUNS, JOB, Sandbox, Variant, clear, commands, owned_checkpoint, put

REPO = Path(__file__).resolve().parents[2]
HASH_LIMIT = 1 << 20


class Worker:
    """The ``hostile_worker`` process (restarted after a hang or a crash)."""

    def __init__(self, scratch: Path, cwd: Path) -> None:
        self.scratch, self.cwd = scratch, cwd
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def _start(self) -> None:
        read_fd, write_fd = os.pipe()
        env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.support.hostile_worker", str(write_fd),
                                      str(self.scratch)], stdin=subprocess.PIPE, pass_fds=(write_fd,),
                                     cwd=self.cwd, env=env, text=True)
        os.close(write_fd)
        self.answers = os.fdopen(read_fd, "r")

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.answers.close()
            self.proc = None

    def run(self, argv: list[str], timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self._start()
            self.restarts += 1
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"argv": argv, "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.answers], [], [], timeout + 15)
        line = self.answers.readline() if ready else ""
        if not line:        # no answer: stuck beyond the timer's reach, or died (OOM, signal)
            died = self.proc.poll()
            self.stop()
            return {"rc": None, "out": "", "err": "", "seconds": timeout + 15,
                    "hang": f"worker {'died with ' + str(died) if died is not None else 'killed: no answer'}"}
        answer = json.loads(line)
        if answer["hang"]:
            self.stop()
        return answer


def snapshot(top: Path, skip: frozenset[str] = frozenset()) -> dict[str, tuple]:
    """path → (type, size, sha256 / mtime, link target); never follows a link, never opens a FIFO.
    ``skip``: paths not to descend into (the harness's own templates)."""
    out: dict[str, tuple] = {}
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.path in skip:
                continue
            st = e.stat(follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out[e.path] = ("link", os.readlink(e.path))
            elif stat.S_ISDIR(st.st_mode):
                out[e.path] = ("dir",)
                stack.append(Path(e.path))
            elif stat.S_ISREG(st.st_mode):
                if st.st_size <= HASH_LIMIT:
                    with open(e.path, "rb") as f:
                        out[e.path] = ("file", st.st_size, hashlib.sha256(f.read()).hexdigest())
                else:
                    out[e.path] = ("file", st.st_size, st.st_mtime_ns)
            else:
                out[e.path] = ("special", stat.S_IFMT(st.st_mode))
    return out


def _under(path: str, top: Path) -> bool:
    return path == str(top) or path.startswith(str(top) + "/")


@dataclass
class Failure:
    variant: str
    command: str
    reason: str

    def to_dict(self) -> dict:
        return {"variant": self.variant, "command": self.command, "reason": self.reason}


def judge(variant: Variant, label: str, sb: Sandbox, answer: dict, changed: list[str]) -> list[str]:
    """Every broken promise of one run, as short reasons."""
    reasons = []
    rc, out, err = answer["rc"], answer["out"], answer["err"]
    if answer["hang"]:
        reasons.append(f"hang after {answer['seconds']}s: {answer['hang']}")
    traceback_seen = "Traceback (most recent call last)" in out + err
    if traceback_seen:
        frames = [ln.strip() for ln in err.splitlines() if ln.strip().startswith("File ")]
        where = frames[-1].replace(str(REPO) + "/", "") if frames else "?"
        reasons.append(f"traceback: {(err.strip().splitlines() or ['?'])[-1][:240]} ({where[:160]})")
    elif rc is not None and rc not in (0, 2, 3):
        reasons.append(f"exit code {rc}")
    lines = len(err.strip().splitlines())
    if (rc == 2 and lines != 1) or (rc == 3 and lines > 1):     # a BLOCK verdict may be on stdout alone
        reasons.append(f"stderr has {lines} lines, not one: {err.strip()[:200]!r}")
    ck = owned_checkpoint(sb, variant)
    siblings = f"{ck}."
    own: list[Path] = []
    if label not in DRY_RUNS:
        if label != "validate":
            own.append(sb.root)
        if label == "restore" and rc == 0:
            own.append(ck)
    written = [p for p in changed if not any(_under(p, o) for o in own)
               and not (label not in DRY_RUNS and p.startswith(siblings))]
    in_ck = [p for p in written if _under(p, ck)]
    outside = [p for p in written if p not in in_ck]
    rel = lambda ps: ", ".join(os.path.relpath(p, sb.v) for p in ps[:4]) + (" ..." if len(ps) > 4 else "")  # noqa: E731
    if in_ck:
        reasons.append(f"checkpoint changed: {rel(in_ck)}")
    if outside:
        reasons.append(f"{'dry run wrote' if label in DRY_RUNS else 'wrote outside its folders'}: {rel(outside)}")
    if label == "validate" and variant.must_not_pass and rc == 0:
        reasons.append("false PASS: validate exited 0 on an input that must not pass")
    if label in variant.must_refuse and rc == 0:
        reasons.append("accepted an input it must refuse (exit 0)")
    if label in variant.must_succeed and rc != 0:
        reasons.append(f"failed on an input it must accept (exit {rc}): {err.strip()[:200]}")
    return reasons


@dataclass
class Corpus:
    """Builds sandboxes from per-checkpoint-name templates and runs the corpus through one worker."""

    base: Path
    topic: str
    bootstrap: str
    timeout: float = 20.0
    worker: Worker = field(init=False)
    templates: dict[tuple[str, bool], tuple[Path, str]] = field(default_factory=dict)
    runs: int = 0

    def __post_init__(self) -> None:
        (self.base / "cwd").mkdir(parents=True, exist_ok=True)
        self._skip = frozenset({str(self.base / "templates")})
        self.scratch = self.base.parent / f"{self.base.name}-worker"
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.worker = Worker(self.scratch, self.base / "cwd")
        self.key_file = self.base / "seal.key"
        put(self.key_file, "hostile-corpus-seal-key-0123456789abcdef\n")

    @property
    def v(self) -> Path:
        return self.base / "v"

    def _template(self, ck_name: str, keyed: bool) -> tuple[Path, str]:
        """A real base: factory checkpoint, record by ``aks validate``, one ``aks backup`` — built once."""
        if (ck_name, keyed) in self.templates:
            return self.templates[(ck_name, keyed)]
        from tests.support.checkpoint_factory import write_checkpoint

        clear(self.v)
        sb = Sandbox(self.v, self.topic, self.bootstrap, ck_name=ck_name)
        for d in (sb.outside, sb.root, sb.ck.parent):
            d.mkdir(parents=True, exist_ok=True)
        put(sb.outside / "secret.txt", "SECRET: not for the backup store\n")
        put(sb.outside / "victim.txt", "must never change\n")
        # batches planned now: after the records they cover were produced (the timestamp identity check)
        write_checkpoint(sb.ck, batches=3, sources=({self.topic: 2},), start_timestamp_ms=int(time.time() * 1000))
        self.worker.run(["validate", "--checkpoint", str(sb.ck), "--bootstrap-servers", self.bootstrap,
                         "--job-name", JOB], self.timeout)
        key = ["--seal-key-file", str(self.key_file)] if keyed else []
        self.worker.run(["backup", "--checkpoint", str(sb.ck), "--backup-root", str(sb.root), "--job", JOB,
                         "--settle", "0", "--reason", "base", *key], self.timeout)
        published = sorted((sb.job_dir / "backups").glob("*.json")) if (sb.job_dir / "backups").is_dir() else []
        backup_id = published[0].name.removesuffix(".json") if published else "20260101T000000000Z-none"
        template = self.base / "templates" / f"t{len(self.templates)}"
        shutil.copytree(self.v, template, symlinks=True)
        self.templates[(ck_name, keyed)] = (template, backup_id)
        return template, backup_id

    def sandbox(self, variant: Variant) -> Sandbox:
        template, backup_id = self._template(variant.ck_name, variant.keyed)
        clear(self.v)
        shutil.copytree(template, self.v, symlinks=True)
        sb = Sandbox(self.v, self.topic, self.bootstrap, ck_name=variant.ck_name, backup_id=backup_id,
                     seal_key_file=self.key_file if variant.keyed else None)
        variant.build(sb)
        return sb

    def run_variant(self, variant: Variant) -> tuple[list[Failure], dict[str, dict]]:
        with open(self.scratch / "progress", "a") as progress:     # outside the snapshot: tail -f it
            progress.write(f"{time.strftime('%H:%M:%S')} {variant.name}\n")
        try:
            sb = self.sandbox(variant)
        except Exception as exc:   # e.g. the base backup failed, so there is no manifest to damage
            return [Failure(variant.name, "build", f"variant could not be built: {type(exc).__name__}: {exc}")], {}
        failures, answers = [], {}
        # One snapshot between two commands serves as the first one's "after" and the next one's "before":
        # nothing but the worker writes under base (the harness only reads in between), and a late write
        # by a command is still seen, as a change during the next command.
        before = snapshot(self.base, self._skip)
        for label, argv in commands(sb, variant):
            answer = self.worker.run(argv, self.timeout)
            after = snapshot(self.base, self._skip)
            self.runs += 1
            changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
            before = after
            answers[label] = {k: answer[k] for k in ("rc", "seconds")} | {"err": answer["err"].strip()[:300]}
            failures += [Failure(variant.name, label, r) for r in judge(variant, label, sb, answer, changed)]
        return failures, answers

    def close(self) -> None:
        self.worker.stop()


def render(failures: list[Failure]) -> str:
    width = max((len(f.variant) for f in failures), default=10)
    return "\n".join(f"{f.variant:<{width}}  {f.command:<11}  {f.reason}" for f in failures)


def main() -> None:
    """``python -m tests.support.hostile_harness BOOTSTRAP TOPIC BASE [NAME-REGEX]`` (topic must exist)."""
    from tests.support.hostile import generate

    bootstrap, topic, base = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    only = re.compile(sys.argv[4] if len(sys.argv) > 4 else "")
    corpus = Corpus(base, topic, bootstrap, timeout=float(os.environ.get("AKS_HOSTILE_TIMEOUT", "20")))
    started, failures = time.monotonic(), []
    try:
        for variant in generate():
            if only.search(variant.name):
                failures += corpus.run_variant(variant)[0]
    finally:
        corpus.close()
    print(render(failures))
    print(f"{corpus.runs} runs, {len(failures)} failures, {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
