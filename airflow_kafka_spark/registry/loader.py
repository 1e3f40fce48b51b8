"""The job registry: every managed streaming job, declared once, in a YAML file beside the DAGs.

Why a registry at all: DAG params and ``dag_run.conf`` are typed by whoever triggers a run. If a
run could name any checkpoint or any backup folder, a typo (or a hostile trigger) could point a
reset at the wrong job's checkpoint, or a restore at ``/etc``. So runs name a *job*, and everything
that can destroy data (checkpoint, output, backup root, stop marker, the application itself) comes
from this file, where it is reviewed like code and checked against ``allowed_roots`` at load.

File format (``dags/streaming_jobs.yaml`` by default, ``$AKS_JOB_REGISTRY`` to override)::

    version: 1                      # optional; the only format so far
    vars:                           # optional; names usable as ${name} in every value below
      data: ${AKS_DATA_DIR:-../.aks-data}
    allowed_roots: [${data}, ${AKS_PACKAGE_DIR}/jobs]
    defaults:                       # optional; any job key except name, merged under each job
      checkpoint: ${data}/checkpoints/{name}
    jobs:
      - name: orders
        topics: [orders]
        ...

Job keys (required: name, application, topics, checkpoint, backup_root; the rest have defaults):
name, application (.py/.jar), application_args (extra args after the flags the operator derives
from the fields below; see ``MANAGED_FLAGS``), spark_conn_id (spark_default), spark_conf
(spark.* only), deploy_mode (client|cluster|unset = the connection's), kafka_conn_id
(kafka_default), topics, checkpoint, output, sink (idempotent|append|parquet), backup_root (may
be shared: backups live in ``<backup_root>/<job>/``), backup_retention {keep_last: 5,
max_age_days: 30}, stop_timeout_s (300), stop_marker (``<checkpoint>.stop``),
compatibility_version ("1"), starting_offsets_default (earliest|latest|offsets JSON),
fail_on_data_loss (true), max_offsets_per_trigger, max_lag_records, max_lag_seconds,
min_headroom_s, stall_after_s (unset = not checked), mirror_group, health_gate {min_batches: 1,
timeout_s: 600, idle_pass_s: 120}. Unknown keys are errors (with a "did you mean"), and so are duplicate keys,
which plain PyYAML would resolve silently in favour of the last one.

Values (not keys) may use ``${VAR}`` and ``${VAR:-default}``: registry ``vars``, then the
built-ins ``AKS_PACKAGE_DIR`` (this package's folder, to reach the bundled reference job on any
install) and ``AKS_REGISTRY_DIR`` (the folder of the YAML file), then the environment. A variable
that is unset *or empty* is an error, because ``${AKS_DATA_DIR}/checkpoints`` with an empty
variable silently becomes ``/checkpoints``. ``$$`` is a literal ``$`` (write ``$${env:HOME}`` to
hand Spark its own substitution syntax). Expansion happens *after* YAML parsing, so an environment
value can never inject YAML structure. In the path fields (checkpoint, output, backup_root,
stop_marker, application) ``{name}`` is replaced with the job name, so one ``defaults`` entry can
serve every job.

Paths: a plain path is local (relative paths are relative to the registry file's folder, so they
mean the same on every worker whatever its cwd), ``file://`` is local too, anything else with a
``scheme://`` is a remote fsspec/Hadoop URL. Local paths are resolved with ``realpath`` before the
root check, which defeats ``..`` and symlinks that leave the root. Remote URLs cannot be resolved
here, so ``.``/``..`` segments (also percent-encoded), empty segments, credentials, queries and
fragments are rejected instead of interpreted.

Secrets never belong here: the registry names connection ids (``kafka_conn_id``,
``spark_conn_id``); the bootstrap servers and every credential come from those connections at
submit time. Keys that look like secrets in ``spark_conf`` or ``application_args`` are rejected.

Every problem is one :class:`~airflow_kafka_spark.errors.UserError` line naming the file, the job,
the field, what is wrong and how to fix it. This module imports nothing from Airflow.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, NoReturn
from urllib.parse import unquote

import yaml

from airflow_kafka_spark._util.storage import load_json
from airflow_kafka_spark.errors import UserError
from airflow_kafka_spark.kafka.view import is_secret_key

REGISTRY_ENV = "AKS_JOB_REGISTRY"
REGISTRY_FILENAME = "streaming_jobs.yaml"
FORMAT_VERSION = 1
STOP_MARKER_SUFFIX = ".stop"
SINKS = ("idempotent", "append", "parquet")
DEPLOY_MODES = ("client", "cluster")
APPLICATION_SUFFIXES = (".py", ".jar")
# A registry is a hand-written list of jobs; anything bigger is a mistake (or a YAML bomb).
MAX_REGISTRY_BYTES = 1024 * 1024

# Used with fullmatch only: ``$`` in re.match also matches before a trailing newline, which
# would let "orders\n" through.
NAME_PATTERN = r"[a-z][a-z0-9_-]{0,62}"
_NAME = re.compile(NAME_PATTERN)
_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VAR_REF = re.compile(r"\$\$|\$\{([^}]*)\}")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):(//)?")
# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Airflow connection ids; anything else (a URI with user:password@host) is not an id.
_CONN_ID = re.compile(r"[A-Za-z0-9_.-]{1,250}")
_GROUP_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

BUILTIN_VARS = ("AKS_PACKAGE_DIR", "AKS_REGISTRY_DIR")

TOP_LEVEL_KEYS = ("version", "vars", "allowed_roots", "defaults", "jobs")
JOB_KEYS = (
    "name", "application", "application_args", "spark_conn_id", "spark_conf", "deploy_mode",
    "kafka_conn_id", "topics", "checkpoint", "output", "sink", "backup_root", "backup_retention",
    "stop_timeout_s", "stop_marker", "compatibility_version", "starting_offsets_default",
    "fail_on_data_loss", "max_offsets_per_trigger", "max_lag_records", "max_lag_seconds",
    "min_headroom_s", "stall_after_s", "mirror_group", "health_gate",
)
REQUIRED_JOB_KEYS = ("name", "application", "topics", "checkpoint", "backup_root")
RETENTION_KEYS = ("keep_last", "max_age_days")
HEALTH_GATE_KEYS = ("min_batches", "timeout_s", "idle_pass_s")
PATH_FIELDS = ("application", "checkpoint", "output", "backup_root", "stop_marker")

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


# --------------------------------------------------------------------------------------------------
# data model
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BackupRetention:
    """How many checkpoint backups to keep: the newest ``keep_last`` always survive; older ones
    go once they are older than ``max_age_days`` (None: never by age)."""

    keep_last: int = 5
    max_age_days: float | None = 30.0


@dataclass(frozen=True)
class HealthGate:
    """After a (re)start, the job counts as healthy once ``min_batches`` new batches commit
    within ``timeout_s`` seconds.

    ``idle_pass_s``: Spark plans no batch while the topics are quiet, so a gate that only counts
    batches would time out (and roll back a good deploy) on a quiet topic. Once the driver has
    been alive this long and the job has nothing left to read, the gate passes as *idle* and says
    that the first batch of the new code is still unproven. ``None`` (``null``) disables it.
    """

    min_batches: int = 1
    timeout_s: float = 600.0
    idle_pass_s: float | None = 120.0


@dataclass(frozen=True)
class JobSpec:
    """One streaming job, validated. Paths are normalised (local ones resolved with realpath)."""

    name: str
    application: str
    topics: tuple[str, ...]
    checkpoint: str
    backup_root: str                          # shared is fine: backup.py keeps <backup_root>/<job>/
    stop_marker: str
    application_args: tuple[str, ...] = ()
    spark_conn_id: str = "spark_default"
    spark_conf: dict[str, str] = field(default_factory=dict)
    deploy_mode: str | None = None            # None: whatever the Spark connection says
    kafka_conn_id: str = "kafka_default"
    output: str | None = None
    sink: str = "idempotent"
    backup_retention: BackupRetention = field(default_factory=BackupRetention)
    stop_timeout_s: float = 300.0
    compatibility_version: str = "1"          # bump it for a checkpoint-breaking change
    starting_offsets_default: str = "earliest"  # earliest | latest | Spark offsets JSON
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    max_lag_records: int | None = None
    max_lag_seconds: float | None = None
    min_headroom_s: float | None = None
    stall_after_s: float | None = None
    mirror_group: str | None = None           # shadow consumer group that makes lag visible in Kafka
    health_gate: HealthGate = field(default_factory=HealthGate)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (for XCom or logs); it holds no secret by construction."""
        out = asdict(self)
        out["topics"] = list(self.topics)
        out["application_args"] = list(self.application_args)
        return out


@dataclass(frozen=True)
class Registry:
    """The loaded registry. Look jobs up with :meth:`get`; it never returns an unchecked name."""

    path: str
    allowed_roots: tuple[str, ...]
    jobs: Mapping[str, JobSpec]

    def get(self, name: object) -> JobSpec:
        """The job called ``name``; a :class:`UserError` for an invalid or unknown name."""
        known = ", ".join(self.names()) or "(none)"
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise UserError(
                f"invalid job name {_show(name)}: a job name matches {NAME_PATTERN} (lower-case letter, "
                f"then letters, digits, '_' or '-'); use one of the registered jobs: {known}")
        try:
            return self.jobs[name]
        except KeyError:
            raise UserError(f"unknown job {name!r}; known jobs: {known} (registry {self.path}); "
                            "add it to the registry or fix the name") from None

    def names(self) -> list[str]:
        return sorted(self.jobs)

    def check_location(self, location: str, *, what: str = "location") -> str:
        """Normalise ``location`` and require it under ``allowed_roots``; returns the normalised form.

        For locations that do not come from the registry (a restore source typed into a DAG run)
        and for re-checking right before a destructive step: a symlink planted after the registry
        was loaded is caught here.
        """
        ctx = _Ctx(Path(self.path))
        loc = _location(ctx, f"{what}", location)
        roots = [_location(ctx, "allowed_roots", r) for r in self.allowed_roots]
        if not any(loc.within(r) for r in roots):
            raise UserError(f"{what} {loc.text!r} is outside the allowed roots "
                            f"({', '.join(self.allowed_roots)}) of {self.path}; use a path under one of them")
        return loc.text

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self.jobs[n] for n in self.names())

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, name: object) -> bool:
        return name in self.jobs


# --------------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------------

def default_registry_path(dags_folder: str | os.PathLike[str] | None = None) -> Path:
    """Where the registry is: ``$AKS_JOB_REGISTRY``, else ``<dags_folder>/streaming_jobs.yaml``.

    Without ``dags_folder`` (the Airflow layer passes ``[core] dags_folder``; the core cannot ask
    Airflow), ``./dags`` and then this checkout's ``dags/`` are tried, so the ``aks`` CLI works
    from the repository without configuration.
    """
    env = os.environ.get(REGISTRY_ENV)
    if env:
        return Path(env)
    if dags_folder is not None:
        return Path(dags_folder) / REGISTRY_FILENAME
    candidates = [Path.cwd() / "dags" / REGISTRY_FILENAME,
                  Path(__file__).resolve().parents[2] / "dags" / REGISTRY_FILENAME]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return candidates[0]


def load_registry(path: str | os.PathLike[str] | None = None, *,
                  dags_folder: str | os.PathLike[str] | None = None) -> Registry:
    """Read, expand and validate the registry; any problem is one :class:`UserError` line."""
    reg_path = Path(path) if path is not None else default_registry_path(dags_folder)
    text = _read(reg_path)
    ctx = _Ctx(reg_path)
    doc = _parse_yaml(ctx, text)
    if not isinstance(doc, dict):
        ctx.fail("the file", f"must be a mapping with {', '.join(TOP_LEVEL_KEYS)}, got {_kind(doc)}",
                 "see the format in airflow_kafka_spark/registry/loader.py or dags/streaming_jobs.yaml")
    _check_keys(ctx, "the file", doc, TOP_LEVEL_KEYS)

    version = doc.get("version", FORMAT_VERSION)
    if version != FORMAT_VERSION or isinstance(version, bool):
        ctx.fail("version", f"{_show(version)} is not supported", f"write version: {FORMAT_VERSION}")

    ctx.vars = _parse_vars(ctx, doc.get("vars"))
    roots = _parse_roots(ctx, doc.get("allowed_roots"))

    defaults = doc.get("defaults") or {}
    if not isinstance(defaults, dict):
        ctx.fail("defaults", f"must be a mapping of job keys, got {_kind(defaults)}",
                 "write defaults: {key: value, ...}")
    _check_keys(ctx, "defaults", defaults, [k for k in JOB_KEYS if k != "name"],
                extra_hint="'name' cannot have a default" if "name" in defaults else "")

    raw_jobs = doc.get("jobs")
    if raw_jobs is None:
        ctx.fail("jobs", "is missing", "add jobs: [ {name: ..., ...} ] (an empty list is allowed)")
    if not isinstance(raw_jobs, list):
        ctx.fail("jobs", f"must be a list of job mappings, got {_kind(raw_jobs)}",
                 "write each job as a '- name: ...' list item")

    jobs: dict[str, JobSpec] = {}
    for index, raw in enumerate(raw_jobs):
        spec = _parse_job(ctx, index, raw, defaults, roots)
        if spec.name in jobs:
            ctx.fail(f"job {spec.name!r}", "is defined twice",
                     "give each job a unique name, or delete the duplicate entry")
        jobs[spec.name] = spec
    _check_cross_job(ctx, list(jobs.values()))
    return Registry(path=str(reg_path), allowed_roots=tuple(r.text for r in roots),
                    jobs=MappingProxyType(jobs))


# --------------------------------------------------------------------------------------------------
# internals: context, YAML, variables
# --------------------------------------------------------------------------------------------------

class _Ctx:
    """What every check needs: the file (for messages), its folder, the variables."""

    def __init__(self, reg_path: Path) -> None:
        self.path = reg_path
        self.base_dir = Path(os.path.abspath(reg_path)).parent
        self.builtins = {
            "AKS_PACKAGE_DIR": str(Path(__file__).resolve().parents[1]),
            "AKS_REGISTRY_DIR": str(self.base_dir),
        }
        self.vars: dict[str, str] = {}

    def fail(self, where: str, problem: str, fix: str) -> NoReturn:
        raise UserError(f"job registry {self.path}: {where}: {problem}; {fix}")

    def lookup(self, name: str) -> str | None:
        if name in self.vars:
            return self.vars[name]
        if name in self.builtins:
            return self.builtins[name]
        return os.environ.get(name)


def _read(reg_path: Path) -> str:
    hint = f"create it, or point ${REGISTRY_ENV} at the registry file"
    try:
        size = reg_path.stat().st_size
        if not reg_path.is_file():
            raise UserError(f"job registry {reg_path} is not a file; {hint}")
        if size > MAX_REGISTRY_BYTES:
            raise UserError(f"job registry {reg_path} is {size} bytes, over the {MAX_REGISTRY_BYTES} "
                            "byte limit; a registry lists jobs, keep data elsewhere")
        return reg_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"job registry {reg_path} does not exist; {hint}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"job registry {reg_path} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                        "save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"job registry {reg_path} cannot be read ({exc.strerror}); "
                        "fix its permissions or the path") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys. Plain PyYAML keeps the *last* of two ``checkpoint:``
    lines without a word, which for this file means silently pointing a job at another folder."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # '<<: *anchor' entries may be overridden by explicit keys, as YAML intends
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable key: PyYAML itself reports it below
        if duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (the second one would silently win)", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def _parse_yaml(ctx: _Ctx, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        fix = ("remove or rename one of them" if "duplicate key" in problem
               else "fix the YAML syntax there (indentation, quoting, a missing ':' or '-')")
        ctx.fail("not valid YAML" + at, problem, fix)
    except yaml.YAMLError as exc:
        ctx.fail("not valid YAML", str(exc).splitlines()[0] if str(exc) else "parse error",
                 "fix the YAML syntax")
    except RecursionError:   # PyYAML composes recursively: thousands of nested [ or { overflow it
        ctx.fail("not valid YAML", "it is nested too deeply", "a registry is a flat list of jobs: remove the nesting")


def _expand(ctx: _Ctx, where: str, value: str) -> str:
    """Replace ``${VAR}``/``${VAR:-default}``/``$$`` in one string value."""

    def repl(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        body = m.group(1)
        name, sep, default = body.partition(":-")
        if not _VAR_NAME.fullmatch(name) or "${" in default:
            ctx.fail(where, f"${{{body}}} is not a variable reference this registry understands",
                     "write ${NAME} or ${NAME:-default} (no nesting), or $${...} for a literal '${'")
        found = ctx.lookup(name)
        if found:
            return found
        if sep:
            return default
        ctx.fail(where, f"uses ${{{name}}}, which is not set (or empty)",
                 f"export {name}=..., define it under 'vars:', or write ${{{name}:-default}}")

    out = _VAR_REF.sub(repl, value)
    # A '${' left after substitution was never closed (the '$$' escape has become '$' already,
    # so look at the input).
    if "${" in _VAR_REF.sub("", value):
        ctx.fail(where, f"has an unclosed '${{' in {value!r}",
                 "close it with '}', or write $$ for a literal '$'")
    return out


def _expand_tree(ctx: _Ctx, where: str, value: Any) -> Any:
    if isinstance(value, str):
        return _expand(ctx, where, value)
    if isinstance(value, list):
        return [_expand_tree(ctx, f"{where}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: _expand_tree(ctx, f"{where}.{k}", v) for k, v in value.items()}
    return value


def _parse_vars(ctx: _Ctx, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        ctx.fail("vars", f"must be a mapping of NAME: value, got {_kind(raw)}",
                 "write vars: {data: /srv/aks}")
    for name, value in raw.items():
        where = f"vars.{name}"
        if not isinstance(name, str) or not _VAR_NAME.fullmatch(name):
            ctx.fail("vars", f"{_show(name)} is not a variable name", "use letters, digits and '_'")
        if name in BUILTIN_VARS:
            ctx.fail(where, f"{name} is built in and cannot be redefined", "pick another name")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            ctx.fail(where, f"must be a string, got {_kind(value)}", "quote the value")
        # Each var may use the ones defined above it (and built-ins and the environment).
        ctx.vars[name] = _expand(ctx, where, str(value))
    return ctx.vars


# --------------------------------------------------------------------------------------------------
# internals: locations
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Loc:
    """A normalised location. ``scheme`` is "" for local paths (plain or file://)."""

    text: str          # what the job uses (local: resolved path, URL: as written minus trailing '/')
    scheme: str
    netloc: str
    path: str          # local: realpath; URL: the path part, no trailing '/'

    def within(self, other: _Loc) -> bool:
        """Equal to, or below, ``other`` (on a path-segment boundary: /data2 is not in /data)."""
        if (self.scheme, self.netloc) != (other.scheme, other.netloc):
            return False
        base = other.path.rstrip("/")
        return self.path == other.path or self.path.startswith(base + "/")

    def overlaps(self, other: _Loc) -> bool:
        return self.within(other) or other.within(self)


def _location(ctx: _Ctx, where: str, raw: Any) -> _Loc:
    if not isinstance(raw, str) or not raw:
        ctx.fail(where, f"must be a non-empty path or URL string, got {_show(raw)}",
                 "set it to a path or URL")
    if _CONTROL.search(raw):
        ctx.fail(where, f"{raw!r} contains a control character", "remove it")
    m = _SCHEME.match(raw)
    if m and len(m.group(1)) > 1:  # one letter would be a Windows drive, never valid here anyway
        scheme = m.group(1).lower()
        if not m.group(2):
            ctx.fail(where, f"{raw!r} has a scheme but no '//'", f"write {scheme}://host/path (or {scheme}:///path)")
        rest = raw[m.end():]
        netloc, slash, upath = rest.partition("/")
        upath = slash + upath
        if scheme == "file":
            if netloc not in ("", "localhost"):
                ctx.fail(where, f"{raw!r} names a remote host in a file:// URL", "write file:///absolute/path")
            if "%" in upath or "?" in upath or "#" in upath:
                ctx.fail(where, f"{raw!r} uses %-encoding, '?' or '#' in a file:// URL",
                         "write the plain local path instead")
            real = _realpath(ctx, where, upath)
            return _Loc(text="file://" + real, scheme="", netloc="", path=real)
        return _remote(ctx, where, raw, scheme, netloc, upath)
    if raw.startswith("~"):
        ctx.fail(where, f"{raw!r} starts with '~', which is not expanded (workers run as other users)",
                 "write an absolute path or use ${HOME}")
    path = raw if os.path.isabs(raw) else os.path.join(ctx.base_dir, raw)
    real = _realpath(ctx, where, path)
    return _Loc(text=real, scheme="", netloc="", path=real)


def _realpath(ctx: _Ctx, where: str, path: str) -> str:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError) as exc:
        ctx.fail(where, f"{path!r} cannot be resolved ({exc})", "fix the path")


def _remote(ctx: _Ctx, where: str, raw: str, scheme: str, netloc: str, upath: str) -> _Loc:
    if "@" in netloc:
        ctx.fail(where, f"the URL has credentials in it ({scheme}://<user>@...)",
                 "remove them; credentials belong in the connection or the cluster's config, "
                 "never in the registry")
    if "?" in upath or "#" in upath or "?" in netloc or "#" in netloc:
        ctx.fail(where, f"{raw!r} has a query or fragment", "write a plain scheme://host/path URL")
    path = upath.rstrip("/")
    segments = path.split("/")[1:] if path else []
    for seg in segments:
        decoded = unquote(seg)
        if decoded in (".", "..") or "/" in decoded:
            ctx.fail(where, f"{raw!r} contains a '{seg}' segment; remote URLs are not normalised here",
                     "write the full path without '.', '..' or encoded '/'")
        if seg == "":
            ctx.fail(where, f"{raw!r} contains an empty segment ('//')", "remove the doubled '/'")
    return _Loc(text=f"{scheme}://{netloc}{path}", scheme=scheme, netloc=netloc, path=path)


def _parse_roots(ctx: _Ctx, raw: Any) -> list[_Loc]:
    if raw is None:
        ctx.fail("allowed_roots", "is missing",
                 "add allowed_roots: [a folder or URL prefix that holds your checkpoints, backups and jobs]")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw:
        ctx.fail("allowed_roots", f"must be a non-empty list of paths or URL prefixes, got {_show(raw)}",
                 "list at least one folder or URL prefix")
    roots = []
    for i, item in enumerate(raw):
        where = f"allowed_roots[{i}]"
        loc = _location(ctx, where, _expand_tree(ctx, where, item))
        if loc.path in ("", "/") and not loc.netloc:
            ctx.fail(where, f"{loc.text or item!r} would allow every path",
                     "name a dedicated folder or bucket")
        roots.append(loc)
    return roots


# --------------------------------------------------------------------------------------------------
# internals: one job
# --------------------------------------------------------------------------------------------------

def _parse_job(ctx: _Ctx, index: int, raw: Any, defaults: dict, roots: list[_Loc]) -> JobSpec:
    if not isinstance(raw, dict):
        ctx.fail(f"jobs[{index}]", f"must be a mapping, got {_kind(raw)}",
                 "write '- name: ...' with the job's keys")
    name = raw.get("name")
    if name is None:
        ctx.fail(f"jobs[{index}]", "has no name", "add name: <lower-case id>")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        ctx.fail(f"jobs[{index}].name", f"{_show(name)} is not a valid job name",
                 f"use {NAME_PATTERN}: a lower-case letter, then up to 62 letters, digits, '_' or '-'")
    job = f"job {name!r}"
    _check_keys(ctx, job, raw, JOB_KEYS)

    merged: dict[str, Any] = dict(defaults)
    for key, value in raw.items():
        if key in ("spark_conf", "backup_retention", "health_gate") and isinstance(value, dict) \
                and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}   # one level deep: a job adds to the default conf
        else:
            merged[key] = value
    missing = [k for k in REQUIRED_JOB_KEYS if merged.get(k) in (None, "", [])]
    if missing:
        ctx.fail(job, f"is missing {', '.join(missing)}", "set them in the job or under defaults")

    v = {k: _expand_tree(ctx, f"{job}.{k}", val) for k, val in merged.items()}
    for key in PATH_FIELDS:
        if isinstance(v.get(key), str):
            v[key] = v[key].replace("{name}", name)

    def loc(key: str) -> _Loc:
        where = f"{job}.{key}"
        found = _location(ctx, where, v[key])
        if not any(found.within(r) for r in roots):
            ctx.fail(where, f"{found.text!r} is outside allowed_roots ({', '.join(r.text for r in roots)})",
                     "move it under one of the roots, or add a root for it")
        if key == "checkpoint" and any(found.path == r.path and found.within(r) for r in roots):
            # Its siblings (<checkpoint>.stop, <checkpoint>.lifecycle.json) would land outside.
            ctx.fail(where, f"{found.text!r} is an allowed root itself",
                     "use a folder below the root, e.g. <root>/checkpoints/<job>")
        return found

    application = loc("application")
    if not application.path.lower().endswith(APPLICATION_SUFFIXES):
        ctx.fail(f"{job}.application", f"{application.text!r} is not a .py or .jar file",
                 "point it at the job's .py file or .jar")
    checkpoint = loc("checkpoint")
    backup_root = loc("backup_root")
    output = loc("output") if v.get("output") not in (None, "") else None
    if v.get("stop_marker") in (None, ""):
        # A plain path for local checkpoints even if written as file://: the reference job tests
        # the marker with os.path.exists on the driver.
        base = checkpoint.path if not checkpoint.scheme else checkpoint.text
        v["stop_marker"] = base + STOP_MARKER_SUFFIX
    stop_marker = loc("stop_marker")

    if backup_root.within(checkpoint):
        ctx.fail(f"{job}.backup_root", f"{backup_root.text!r} is inside the checkpoint {checkpoint.text!r}",
                 "a reset or restore of the checkpoint would destroy its own backups; put backups beside it")
    if checkpoint.within(backup_root):
        ctx.fail(f"{job}.checkpoint", f"{checkpoint.text!r} is inside backup_root {backup_root.text!r}",
                 "backup retention would prune the live checkpoint; use separate folders")
    if output is not None and output.overlaps(checkpoint):
        ctx.fail(f"{job}.output", f"{output.text!r} and the checkpoint {checkpoint.text!r} overlap",
                 "Spark owns the checkpoint folder and a reset deletes it; use separate folders")
    if output is not None and output.overlaps(backup_root):
        ctx.fail(f"{job}.output", f"{output.text!r} and backup_root {backup_root.text!r} overlap",
                 "use separate folders")
    if stop_marker.within(checkpoint):
        ctx.fail(f"{job}.stop_marker", f"{stop_marker.text!r} is inside the checkpoint",
                 f"leave it unset (default: <checkpoint>{STOP_MARKER_SUFFIX}) "
                 "or put it beside the checkpoint")

    topics = _str_list(ctx, f"{job}.topics", v["topics"])
    if not topics:
        ctx.fail(f"{job}.topics", "is empty", "list at least one topic")
    for t in topics:
        if not _TOPIC.fullmatch(t) or t in (".", ".."):
            ctx.fail(f"{job}.topics", f"{t!r} is not a legal Kafka topic name",
                     "use letters, digits, '.', '_' and '-' (at most 249)")
    if len(set(topics)) != len(topics):
        ctx.fail(f"{job}.topics", "lists a topic twice", "remove the duplicate")

    sink = _choice(ctx, f"{job}.sink", v.get("sink", "idempotent"), SINKS)
    if sink == "parquet" and output is None:
        ctx.fail(f"{job}.output", "is required for the parquet sink", "set output to the sink folder")

    return JobSpec(
        name=name,
        application=application.text,
        application_args=_application_args(ctx, f"{job}.application_args", v.get("application_args")),
        spark_conn_id=_conn_id(ctx, f"{job}.spark_conn_id", v.get("spark_conn_id", "spark_default")),
        spark_conf=_spark_conf(ctx, f"{job}.spark_conf", v.get("spark_conf")),
        deploy_mode=None if v.get("deploy_mode") is None
        else _choice(ctx, f"{job}.deploy_mode", v["deploy_mode"], DEPLOY_MODES),
        kafka_conn_id=_conn_id(ctx, f"{job}.kafka_conn_id", v.get("kafka_conn_id", "kafka_default")),
        topics=tuple(topics),
        checkpoint=checkpoint.text,
        output=output.text if output else None,
        sink=sink,
        backup_root=backup_root.text,
        backup_retention=_retention(ctx, f"{job}.backup_retention", v.get("backup_retention")),
        stop_timeout_s=_number(ctx, f"{job}.stop_timeout_s", v.get("stop_timeout_s"), 300.0, positive=True),
        stop_marker=stop_marker.text,
        compatibility_version=_compat(ctx, f"{job}.compatibility_version",
                                      v.get("compatibility_version", "1")),
        starting_offsets_default=_starting_offsets(ctx, f"{job}.starting_offsets_default",
                                                   v.get("starting_offsets_default", "earliest"), topics),
        fail_on_data_loss=_bool(ctx, f"{job}.fail_on_data_loss", v.get("fail_on_data_loss", True)),
        max_offsets_per_trigger=_int(ctx, f"{job}.max_offsets_per_trigger", v.get("max_offsets_per_trigger"),
                                     minimum=1),
        # Thresholds are positive when set (as status.StatusThresholds requires); unset = not checked.
        max_lag_records=_int(ctx, f"{job}.max_lag_records", v.get("max_lag_records"), minimum=1),
        max_lag_seconds=_number(ctx, f"{job}.max_lag_seconds", v.get("max_lag_seconds"), None, positive=True),
        min_headroom_s=_number(ctx, f"{job}.min_headroom_s", v.get("min_headroom_s"), None, positive=True),
        stall_after_s=_number(ctx, f"{job}.stall_after_s", v.get("stall_after_s"), None, positive=True),
        mirror_group=_group(ctx, f"{job}.mirror_group", v.get("mirror_group")),
        health_gate=_health_gate(ctx, f"{job}.health_gate", v.get("health_gate")),
    )


def _check_cross_job(ctx: _Ctx, specs: list[JobSpec]) -> None:
    """Two jobs must never share a checkpoint (Spark would interleave two queries' logs), nor may
    one job's folders sit inside another's checkpoint (a reset of one would delete the other's)."""
    locs = {s.name: {k: _location(ctx, f"job {s.name!r}.{k}", getattr(s, k))
                     for k in ("checkpoint", "backup_root", "output") if getattr(s, k)} for s in specs}
    for i, a in enumerate(specs):
        for b in specs[i + 1:]:
            ca, cb = locs[a.name]["checkpoint"], locs[b.name]["checkpoint"]
            if ca.overlaps(cb):
                ctx.fail(f"job {b.name!r}.checkpoint",
                         f"{cb.text!r} overlaps the checkpoint of job {a.name!r}",
                         "give every job its own checkpoint folder")
            for x, y in ((a, b), (b, a)):
                cx = locs[x.name]["checkpoint"]
                for key in ("backup_root", "output"):
                    other = locs[y.name].get(key)
                    if other is not None and other.overlaps(cx):
                        ctx.fail(f"job {y.name!r}.{key}",
                                 f"{other.text!r} overlaps the checkpoint of job {x.name!r}",
                                 "keep each job's folders apart from other jobs' checkpoints")
            if a.stop_marker == b.stop_marker:
                ctx.fail(f"job {b.name!r}.stop_marker", f"is also the stop marker of job {a.name!r}",
                         "stopping one job would stop both; give each its own marker (or leave it unset)")
            if a.mirror_group and a.mirror_group == b.mirror_group:
                ctx.fail(f"job {b.name!r}.mirror_group", f"{b.mirror_group!r} is also job {a.name!r}'s",
                         "two jobs committing to one group make its lag meaningless; use one group per job")
            oa, ob = locs[a.name].get("output"), locs[b.name].get("output")
            if oa and ob and "parquet" in (a.sink, b.sink) and oa.overlaps(ob):
                ctx.fail(f"job {b.name!r}.output", f"{ob.text!r} overlaps the output of job {a.name!r}",
                         "a parquet sink's _spark_metadata log belongs to one query; use separate folders")


# --------------------------------------------------------------------------------------------------
# internals: scalar fields
# --------------------------------------------------------------------------------------------------

def _check_keys(ctx: _Ctx, where: str, mapping: dict, allowed: tuple[str, ...] | list[str],
                extra_hint: str = "") -> None:
    for key in mapping:
        if key in allowed:
            continue
        if not isinstance(key, str):
            ctx.fail(where, f"has a non-text key {_show(key)}", "keys are names like 'checkpoint'")
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = extra_hint or (f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(allowed)}")
        ctx.fail(where, f"unknown key {key!r}", hint)


def _str_list(ctx: _Ctx, where: str, value: Any) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        ctx.fail(where, f"must be a list of strings, got {_kind(value)}", "write [a, b]")
    for item in value:
        if not isinstance(item, str):
            ctx.fail(where, f"{_show(item)} is {_kind(item)}, not a string",
                     "quote it (YAML reads yes/no/on/off as booleans and 007 as a number)")
    return list(value)


def _application_args(ctx: _Ctx, where: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        ctx.fail(where, f"must be a list, got {_kind(value)}", "write [--flag, value, ...]")
    args = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            ctx.fail(where, f"{_show(item)} is {_kind(item)}, not a string", "quote it")
        args.append(str(item))
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in MANAGED_FLAGS:
            ctx.fail(where, f"sets {flag}, which comes from {MANAGED_FLAGS[flag]}",
                     "remove it from application_args; the operator passes it")
        key = flag.lstrip("-")
        if ("=" in arg or arg.startswith("-")) and is_secret_key(key):
            ctx.fail(where, f"{flag!r} looks like a secret", "secrets belong in the Airflow connection, "
                     "not in the registry (it holds connection ids only)")
    return tuple(args)


def _spark_conf(ctx: _Ctx, where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        ctx.fail(where, f"must be a mapping of spark.* keys, got {_kind(value)}", "write {spark.x: value}")
    out: dict[str, str] = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key.startswith("spark."):
            ctx.fail(where, f"key {_show(key)} does not start with 'spark.'",
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
            ctx.fail(f"{where}.{key}", f"must be a single value, got {_kind(val)}",
                     "write a string or number")
    return out


def _conn_id(ctx: _Ctx, where: str, value: Any) -> str:
    if not isinstance(value, str) or not _CONN_ID.fullmatch(value):
        ctx.fail(where, f"{_show(value)} is not an Airflow connection id",
                 "write the id only (letters, digits, '_', '.', '-'); the connection holds hosts and secrets")
    return value


def _group(ctx: _Ctx, where: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _GROUP_ID.fullmatch(value):
        ctx.fail(where, f"{_show(value)} is not a usable consumer group id",
                 "use letters, digits, '.', '_' and '-'")
    return value


def _choice(ctx: _Ctx, where: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices or not isinstance(value, str):
        ctx.fail(where, f"{_show(value)} is not one of {', '.join(choices)}",
                 f"use one of {', '.join(choices)}")
    return value


def _bool(ctx: _Ctx, where: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"   # a ${VAR} expansion is always a string
    ctx.fail(where, f"{_show(value)} is not true or false", "write true or false")


def _int(ctx: _Ctx, where: str, value: Any, *, minimum: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        value = int(value)            # from a ${VAR} expansion
    if isinstance(value, bool) or not isinstance(value, int):
        ctx.fail(where, f"{_show(value)} is not a whole number", "write an integer (or remove the key)")
    if value < minimum:
        ctx.fail(where, f"{value} is below {minimum}", f"use a value >= {minimum}")
    return value


def _number(ctx: _Ctx, where: str, value: Any, default: float | None, *,
            positive: bool = False) -> float | None:
    if value is None:
        return default
    if isinstance(value, str):
        try:
            value = float(value)      # from a ${VAR} expansion
        except ValueError:
            ctx.fail(where, f"{value!r} is not a number", "write a number of seconds (or remove the key)")
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:  # NaN
        ctx.fail(where, f"{_show(value)} is not a number", "write a number (or remove the key)")
    if value < 0 or (positive and value == 0):
        ctx.fail(where, f"{value} must be {'> 0' if positive else '>= 0'}", "use a positive number")
    return float(value)


def _compat(ctx: _Ctx, where: str, value: Any) -> str:
    if isinstance(value, float):
        ctx.fail(where, f"{value!r} was read as a number", "quote it (\"1.10\" would otherwise become 1.1)")
    if isinstance(value, bool) or not isinstance(value, str | int) or str(value).strip() == "":
        ctx.fail(where, f"{_show(value)} is not a version string", "write a quoted string such as \"1\"")
    return str(value)


def _starting_offsets(ctx: _Ctx, where: str, value: Any, topics: list[str]) -> str:
    if value in ("earliest", "latest"):
        return value
    if isinstance(value, str):
        try:
            parsed = load_json(value, what=where)
        except ValueError:
            ctx.fail(where, f"{_show(value)} is neither earliest, latest nor Spark offsets JSON",
                     "write earliest, latest or {\"topic\": {\"0\": 42}}")
    else:
        parsed = value
    if not isinstance(parsed, dict) or not parsed:
        ctx.fail(where, f"{_show(value)} is not earliest, latest or a topic -> partition -> offset mapping",
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


def _retention(ctx: _Ctx, where: str, value: Any) -> BackupRetention:
    if value is None:
        return BackupRetention()
    if not isinstance(value, dict):
        ctx.fail(where, f"must be a mapping, got {_kind(value)}", "write {keep_last: 5, max_age_days: 30}")
    _check_keys(ctx, where, value, RETENTION_KEYS)
    keep = _int(ctx, f"{where}.keep_last", value.get("keep_last", BackupRetention.keep_last), minimum=1)
    age = _number(ctx, f"{where}.max_age_days", value["max_age_days"], None, positive=True) \
        if "max_age_days" in value else BackupRetention.max_age_days
    return BackupRetention(keep_last=keep if keep is not None else BackupRetention.keep_last,
                           max_age_days=age)


def _health_gate(ctx: _Ctx, where: str, value: Any) -> HealthGate:
    if value is None:
        return HealthGate()
    if not isinstance(value, dict):
        ctx.fail(where, f"must be a mapping, got {_kind(value)}", "write {min_batches: 1, timeout_s: 600}")
    _check_keys(ctx, where, value, HEALTH_GATE_KEYS)
    batches = _int(ctx, f"{where}.min_batches", value.get("min_batches", HealthGate.min_batches), minimum=1)
    timeout = _number(ctx, f"{where}.timeout_s", value.get("timeout_s"), HealthGate.timeout_s, positive=True)
    idle: float | None = HealthGate.idle_pass_s
    if "idle_pass_s" in value:
        idle = _number(ctx, f"{where}.idle_pass_s", value["idle_pass_s"], None, positive=True)
    return HealthGate(min_batches=batches or HealthGate.min_batches,
                      timeout_s=timeout if timeout is not None else HealthGate.timeout_s, idle_pass_s=idle)


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", bool: "a boolean", type(None): "nothing (null)",
            int: "a number", float: "a number", str: "a string"}.get(type(value), type(value).__name__)


def _show(value: Any) -> str:
    """repr, shortened: error messages must stay one readable line even for hostile input."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
