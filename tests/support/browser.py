"""Headless Chromium (Debian's ``chromium``) driven over the DevTools protocol, for the UI tests.

Why not Playwright or Selenium: Playwright downloads its own browser builds from a CDN and Selenium
needs a matching chromedriver; neither is on PyPI/Debian alone. The DevTools protocol is what both
speak underneath: one JSON message per call over a websocket (``websockets``, already in the
environment), with the browser ``bin/setup`` installs. Only the handful of calls a test needs.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str:
    found = os.environ.get("AKS_CHROMIUM") or next((p for c in CANDIDATES if (p := shutil.which(c))), None)
    if not found:
        pytest.fail("chromium not found: run bin/setup (it installs Debian's chromium) or set AKS_CHROMIUM")
    return found


class Browser:
    """One headless Chromium with one page; ``with Browser() as b: b.goto(url)``."""

    def __init__(self, width: int = 1500, height: int = 900) -> None:
        self.size = (width, height)
        self.profile = Path(tempfile.mkdtemp(prefix="aks-chromium-"))
        self.proc: subprocess.Popen | None = None
        self.ws: Any = None
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        args = [chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}", f"--window-size={self.size[0]},{self.size[1]}", "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        port = self._devtools_port()
        deadline = time.monotonic() + 30
        while True:
            pages = [t for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
                     if t.get("type") == "page"]
            if pages or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert pages, "chromium opened no page"
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 2**20, open_timeout=30).__enter__()
        self.call("Page.enable")
        self.call("Runtime.enable")
        return self

    def _devtools_port(self) -> int:
        """The port from the "DevTools listening on ws://127.0.0.1:<port>/..." line chromium prints."""
        assert self.proc is not None and self.proc.stderr is not None
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line and self.proc.poll() is not None:
                break
            seen.append(line)
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m:
                return int(m.group(1))
        pytest.fail("chromium did not start:\n" + "".join(seen[-30:]))

    def __exit__(self, *exc: object) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    # -- protocol ---------------------------------------------------------------------------------

    def call(self, method: str, timeout: float = 60, **params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            doc = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if doc.get("id") == msg_id:
                if "error" in doc:
                    raise AssertionError(f"{method}: {doc['error']}")
                return doc.get("result", {})
            self.events.append(doc)

    def js(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page (promises awaited); its JSON value."""
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise AssertionError(f"{expression[:200]}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def wait_for(self, expression: str, *, timeout: float = 60, what: str = "") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.js(expression)
            except AssertionError:   # a navigation replaced the context mid-call
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                text = self.js("document.body && document.body.innerText")
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or expression}; "
                                     f"page {self.js('location.href')}:\n{text}")
            time.sleep(0.25)

    # -- what a person does -----------------------------------------------------------------------

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def type_into(self, selector: str, text: str) -> None:
        """Focus ``selector`` and type ``text`` as keyboard input (React's controlled inputs see it)."""
        assert self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                       "if (!e) return false; e.focus(); return true; })()"), f"no element {selector}"
        self.call("Input.insertText", text=text)

    def click(self, selector: str) -> None:
        assert self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                       "if (!e) return false; e.click(); return true; })()"), f"no element {selector}"

    def cookies(self) -> dict[str, str]:
        return {c["name"]: c["value"] for c in self.call("Network.getAllCookies").get("cookies", [])}

    def screenshot(self, path: Path) -> Path:
        height = int(self.js("Math.max(document.body.scrollHeight, 400)") or 900)
        self.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=min(height, 4000),
                  deviceScaleFactor=1, mobile=False)
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path
