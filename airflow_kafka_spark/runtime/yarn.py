"""A YARN ResourceManager REST client on the standard library alone (``urllib``).

Why: an Airflow worker or triggerer must be able to tell whether a cluster-mode driver lives, why
it ended, stop it and show its log, from any host, without a ``yarn``/``spark-submit`` binary or a
JVM. Everything here is one HTTP request to the ResourceManager (or to the NodeManager that holds
the driver's container logs), with a timeout and a one-line error.

* :meth:`ResourceManager.app` - state, final status, diagnostics (``GET /ws/v1/cluster/apps/{id}``).
* :meth:`ResourceManager.find` - applications by tag (and name), newest first.
* :meth:`ResourceManager.kill` - ``PUT /ws/v1/cluster/apps/{id}/state {"state": "KILLED"}``.
* :meth:`ResourceManager.driver_log_tail` - the end of the AM (driver, in cluster mode) container's
  log from the NodeManager (``/ws/v1/node/containerlogs/{container}/{file}?size=-N``).

HA: pass every RM's web address; each call tries them in order (starting with the one that answered
last) and skips those that refuse, time out or redirect as standby.

Security: ``simple`` auth sends ``user.name`` on each request. For Kerberos (SPNEGO) pass an
``authenticate`` callable that adds the ``Authorization: Negotiate ...`` header to each
:class:`urllib.request.Request` (e.g. from ``gssapi``/``requests-gssapi``); it is the one extension
point and the client does not import any Kerberos library itself.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from airflow_kafka_spark.errors import UserError

APP_ID = re.compile(r"^application_\d+_\d+$")
CONTAINER_ID = re.compile(r"container_(?:e\d+_)?\d+_\d+_\d+_\d+")


class YarnError(UserError):
    """The ResourceManager could not be reached or refused the request."""


class ApplicationNotFound(YarnError):
    """No such application on the ResourceManager (never submitted, or already purged)."""


class AppState(StrEnum):
    NEW = "NEW"
    NEW_SAVING = "NEW_SAVING"
    SUBMITTED = "SUBMITTED"
    ACCEPTED = "ACCEPTED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"

    @property
    def terminal(self) -> bool:
        return self in (AppState.FINISHED, AppState.FAILED, AppState.KILLED)


class FinalStatus(StrEnum):
    UNDEFINED = "UNDEFINED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    ENDED = "ENDED"


@dataclass(frozen=True)
class YarnApp:
    """One application as the RM reports it (only the fields the product uses)."""

    id: str
    name: str
    state: AppState
    final_status: FinalStatus
    diagnostics: str = ""
    tags: tuple[str, ...] = ()
    user: str = ""
    queue: str = ""
    started_ms: int = 0
    finished_ms: int = 0
    tracking_url: str = ""
    am_container_logs: str = ""
    am_host_http_address: str = ""

    @property
    def alive(self) -> bool:
        """Submitted and not ended: the driver is starting or running."""
        return not self.state.terminal

    @property
    def succeeded(self) -> bool:
        return self.state is AppState.FINISHED and self.final_status is FinalStatus.SUCCEEDED

    @property
    def am_container_id(self) -> str | None:
        """The ApplicationMaster's container: the driver's, in cluster deploy mode."""
        m = CONTAINER_ID.search(self.am_container_logs)
        return m.group(0) if m else None

    def summary(self) -> str:
        """One line for a task log: id, state, final status and the first diagnostics line."""
        diag = self.diagnostics.strip().splitlines()[0][:300] if self.diagnostics.strip() else ""
        return f"{self.id} {self.state.value}/{self.final_status.value}" + (f": {diag}" if diag else "")

    @classmethod
    def from_json(cls, data: dict) -> YarnApp:
        """Parse one ``app`` object of ``/ws/v1/cluster/apps``; unknown states are a one-line error."""
        try:
            state = AppState(data["state"])
            final = FinalStatus(data.get("finalStatus") or "UNDEFINED")
            app_id = data["id"]
        except (KeyError, ValueError, TypeError) as exc:
            raise YarnError(f"unexpected application record from the ResourceManager ({exc}): "
                            f"{json.dumps(data)[:200]}") from None
        tags = data.get("applicationTags") or ""
        return cls(
            id=app_id, name=data.get("name", ""), state=state, final_status=final,
            diagnostics=data.get("diagnostics") or "",
            tags=tuple(t for t in tags.split(",") if t), user=data.get("user", ""), queue=data.get("queue", ""),
            started_ms=int(data.get("startedTime") or 0), finished_ms=int(data.get("finishedTime") or 0),
            tracking_url=data.get("trackingUrl") or "", am_container_logs=data.get("amContainerLogs") or "",
            am_host_http_address=data.get("amHostHttpAddress") or "")


def parse_apps(body: dict) -> list[YarnApp]:
    """``{"apps": {"app": [...]}}``; ``{"apps": null}`` when none; a lone app may come as an object."""
    apps = (body or {}).get("apps") or {}
    items = apps.get("app") or []
    if isinstance(items, dict):
        items = [items]
    return [YarnApp.from_json(a) for a in items]


def check_app_id(app_id: str) -> str:
    if not isinstance(app_id, str) or not APP_ID.match(app_id):
        raise YarnError(f"{app_id!r} is not a YARN application id: expected application_<cluster ts>_<n>, "
                        "as printed by spark-submit ('Submitted application ...')")
    return app_id


def _short(body: bytes) -> str:
    """The RM's error message (RemoteException JSON) or the first line of the body."""
    try:
        exc = json.loads(body).get("RemoteException", {})
        if exc.get("message"):
            return exc["message"].splitlines()[0][:300]
    except (ValueError, AttributeError):
        pass
    text = body.decode("utf-8", "replace").strip()
    title = re.search(r"<title>\s*(.*?)\s*</title>", text, re.S | re.I)
    if title:  # an HTML error page (a NodeManager, a proxy, a standby RM's UI)
        return "HTML page: " + " ".join(title.group(1).split())[:200]
    return text.splitlines()[0][:300] if text else ""


@dataclass
class ResourceManager:
    """REST client for one YARN cluster; ``urls`` lists every RM web address (HA) in preference order."""

    urls: Sequence[str]
    timeout: float = 10.0
    user: str | None = None
    authenticate: Callable[[urllib.request.Request], None] | None = None
    _active: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.urls, str):
            self.urls = [u for u in self.urls.split(",") if u.strip()]
        self.urls = [u.strip().rstrip("/") for u in self.urls]
        if not self.urls or not all(u.startswith(("http://", "https://")) for u in self.urls):
            raise YarnError(f"ResourceManager addresses must be http(s)://host:port URLs (got {list(self.urls)}); "
                            "use yarn.resourcemanager.webapp.address of each RM")

    # -- transport ---------------------------------------------------------------------------
    def _url(self, base: str, path: str, query: dict[str, str] | None) -> str:
        q = dict(query or {})
        if self.user:
            q.setdefault("user.name", self.user)
        return base + path + (("?" + urllib.parse.urlencode(q)) if q else "")

    def _open(self, url: str, method: str = "GET", body: dict | None = None,
              accept: str = "application/json") -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={"Accept": accept})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.authenticate is not None:
            self.authenticate(req)
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return resp.status, resp.read()

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                body: dict | None = None) -> tuple[int, bytes]:
        """One call to the active RM: the status and body of the first RM that answers as active."""
        order = [*range(self._active, len(self.urls)), *range(0, self._active)]
        failures: list[str] = []
        for i in order:
            url = self._url(self.urls[i], path, query)
            try:
                status, data = self._open(url, method, body)
            except urllib.error.HTTPError as exc:
                if exc.code in (301, 302, 303, 307, 308):  # a standby RM redirects to the active one
                    failures.append(f"{self.urls[i]} is standby")
                    continue
                self._active = i
                return exc.code, exc.read()
            except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                failures.append(f"{self.urls[i]}: {reason}")
                continue
            if b"This is standby RM" in data[:2000]:
                failures.append(f"{self.urls[i]} is standby")
                continue
            self._active = i
            return status, data
        raise YarnError(f"no ResourceManager answered ({'; '.join(failures)}); check the RM web addresses "
                        f"and that the Airflow host can reach them (timeout {self.timeout:g}s)")

    def _json(self, method: str, path: str, *, what: str, app_id: str | None = None,
              query: dict[str, str] | None = None, body: dict | None = None) -> dict:
        status, data = self.request(method, path, query=query, body=body)
        if status == 404 and app_id:
            raise ApplicationNotFound(f"YARN has no application {app_id} ({_short(data)}); it was never submitted "
                                      "to this cluster or the RM already purged it "
                                      "(yarn.resourcemanager.max-completed-applications)")
        if status in (401, 403):
            raise YarnError(f"the ResourceManager refused to {what} (HTTP {status}: {_short(data)}); "
                            "pass user= for simple auth or an authenticate= hook for Kerberos")
        if status >= 400:
            raise YarnError(f"the ResourceManager could not {what} (HTTP {status}: {_short(data)})")
        try:
            return json.loads(data)
        except ValueError:
            raise YarnError(f"the ResourceManager answered {what} with something that is not JSON: "
                            f"{_short(data)!r}; is this URL the RM's web address?") from None

    # -- API ---------------------------------------------------------------------------------
    def cluster_state(self) -> str:
        """``STARTED`` on a healthy active RM (``/ws/v1/cluster/info``)."""
        return self._json("GET", "/ws/v1/cluster/info", what="report its state")["clusterInfo"]["state"]

    def app(self, app_id: str) -> YarnApp:
        check_app_id(app_id)
        body = self._json("GET", f"/ws/v1/cluster/apps/{app_id}", what=f"report {app_id}", app_id=app_id)
        return YarnApp.from_json(body.get("app") or {})

    def find(self, *, tag: str | None = None, name: str | None = None,
             states: Sequence[AppState] = ()) -> list[YarnApp]:
        """Applications with ``tag`` (YARN stores tags lower-cased) and ``name``, newest first."""
        query: dict[str, str] = {}
        if tag:
            query["applicationTags"] = tag.lower()
        if states:
            query["states"] = ",".join(s.value for s in states)
        apps = parse_apps(self._json("GET", "/ws/v1/cluster/apps", what="list applications", query=query))
        if tag:
            apps = [a for a in apps if tag.lower() in a.tags]
        if name is not None:
            apps = [a for a in apps if a.name == name]
        return sorted(apps, key=lambda a: (a.started_ms, a.id), reverse=True)

    def kill(self, app_id: str) -> YarnApp:
        """Ask the RM to kill ``app_id``; a no-op for an application that already ended."""
        current = self.app(app_id)
        if current.state.terminal:
            return current
        self._json("PUT", f"/ws/v1/cluster/apps/{app_id}/state", what=f"kill {app_id}", app_id=app_id,
                   body={"state": AppState.KILLED.value})
        return self.app(app_id)

    def driver_log_tail(self, app: YarnApp | str, *, file: str = "stderr", max_bytes: int = 8192) -> str:
        """The last ``max_bytes`` of the AM container's ``file`` (the driver's log in cluster mode).

        Read from the NodeManager that ran the container; with log aggregation on and the app
        finished, the NM serves the aggregated copy on the same URL. Raises YarnError if unreachable.
        """
        if isinstance(app, str):
            app = self.app(app)
        cid = app.am_container_id
        if not cid or not app.am_host_http_address:
            raise YarnError(f"{app.id} has no ApplicationMaster container yet (state {app.state.value}): no driver log")
        scheme = "https" if self.urls[0].startswith("https") else "http"
        query = {"size": str(-abs(max_bytes))} | ({"user.name": self.user} if self.user else {})
        url = (f"{scheme}://{app.am_host_http_address}/ws/v1/node/containerlogs/{cid}/{file}?"
               + urllib.parse.urlencode(query))
        try:
            _, data = self._open(url, accept="text/plain")
        except urllib.error.HTTPError as exc:
            raise YarnError(f"the NodeManager at {app.am_host_http_address} has no {file} for {cid} "
                            f"(HTTP {exc.code}: {_short(exc.read())})") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise YarnError(f"the NodeManager at {app.am_host_http_address} did not answer for {cid}'s log "
                            f"({getattr(exc, 'reason', exc)})") from None
        return data.decode("utf-8", "replace")
