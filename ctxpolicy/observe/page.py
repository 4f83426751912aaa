"""The dashboard's one static page: its files (package data) and the self-contained
HTML ``ctxpolicy report --html`` writes.

The page is ``static/dashboard.html`` with ``dashboard/app.css`` and
``dashboard/app.js`` beside it. Served by the gateway it polls ``dashboard/api``;
written by :func:`report_html` it carries its styles, script and data inline and
works from a file, offline. No build step, nothing fetched from a third party.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["ASSETS", "asset", "report_html"]

#: URL name under ``/dashboard/`` → (file in ``static/``, media type).
ASSETS: dict[str, tuple[str, str]] = {
    "": ("dashboard.html", "text/html; charset=utf-8"),
    "app.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "app.css": ("dashboard.css", "text/css; charset=utf-8"),
}


@functools.lru_cache(maxsize=8)
def asset(name: str) -> bytes:
    """The bytes of ``static/<name>`` (package data)."""
    return resources.files("ctxpolicy.observe").joinpath("static").joinpath(name).read_bytes()


def _script_json(data: Any) -> str:
    """``data`` as JSON safe inside a ``<script>`` element (no ``</``, no ``<!--``)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def report_html(snapshot: dict[str, Any]) -> str:
    """The page with its styles, script and ``snapshot`` inline (one file)."""
    html = asset("dashboard.html").decode("utf-8")
    css = asset("dashboard.css").decode("utf-8")
    js = asset("dashboard.js").decode("utf-8").replace("</", "<\\/")
    html = html.replace(
        '<link rel="stylesheet" href="dashboard/app.css">', "<style>\n" + css + "</style>"
    )
    html = html.replace(
        '<script type="application/json" id="embedded">null</script>',
        '<script type="application/json" id="embedded">' + _script_json(snapshot) + "</script>",
    )
    html = html.replace('<script src="dashboard/app.js"></script>', "<script>\n" + js + "</script>")
    return html
