"""A real headless Chromium driven over its DevTools protocol (no Selenium/Playwright).

:func:`chromium_or_skip` finds the browser (Debian package ``chromium``; ``make
chromium`` installs it): missing, the test is skipped with the reason, and fails under
``CI``. :class:`Browser` starts it with a fresh profile on a free DevTools port and
speaks to one page over the protocol's websocket: navigate, evaluate, screenshot, the
console errors and uncaught exceptions seen so far.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)


def chromium_or_skip() -> str:
    """The Chromium executable; skip (fail under ``CI``) when there is none."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    reason = "no Chromium: `make chromium` installs the Debian package (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, executable: str, width: int = 1280, height: int = 800) -> None:
        from websockets.sync.client import connect

        self.profile = tempfile.mkdtemp(prefix="ctxpolicy-chromium-")
        self.proc = subprocess.Popen(
            [
                executable,
                *FLAGS,
                f"--user-data-dir={self.profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("Chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(port_file.read_text().split()[0])
        pages = [
            t
            for t in httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            if t.get("type") == "page"
        ]
        self.ws = connect(pages[0]["webSocketDebuggerUrl"], max_size=64 * 1024 * 1024)
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(method)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        ws = getattr(self, "ws", None)
        if ws is not None:
            ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.profile, ignore_errors=True)

    def _note(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params") or {}
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args") or []
            self.errors.append(
                "console: " + " ".join(str(a.get("value", a.get("description"))) for a in args)
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails") or {}
            exc = details.get("exception") or {}
            self.errors.append("exception: " + str(exc.get("description") or details.get("text")))
        elif method == "Log.entryAdded":
            entry = params.get("entry") or {}
            if entry.get("level") == "error":
                self.errors.append(f"log: {entry.get('text')} {entry.get('url', '')}")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command; its result (events that arrive meanwhile are noted)."""
        ident = next(self._ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=60))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result") or {})
            self._note(msg)

    def pump(self, seconds: float) -> None:
        """Read the events of ``seconds`` (console errors of a live page)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                self._note(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                break

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"evaluate {expression!r}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        """Evaluate ``expression`` until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:  # the page is not there yet (still navigating)
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            self.pump(0.1)

    def viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=2 if mobile else 1,
            mobile=mobile,
        )

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
