"""The scripted server answers a failing ``script`` with one line naming the error and
where the script raised it: never a stack trace, never a hang."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ctxpolicy.testing.server import ScriptedLLMServer


def _broken(body: dict[str, Any]) -> dict[str, Any]:
    files: list[str] = []
    return {"content": files[len(body) % len(files)]}  # ZeroDivisionError


def test_a_failing_script_answers_one_line_with_where() -> None:
    with ScriptedLLMServer(window=8000, script=_broken) as srv:
        req = urllib.request.Request(
            srv.base_url + "/chat/completions",
            data=json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(req, timeout=30)
            raise AssertionError("expected a 500")
        except urllib.error.HTTPError as exc:
            assert exc.code == 500
            message = json.loads(exc.read())["error"]["message"]
    assert message.startswith("the scripted model (the server's `script`) failed at ")
    assert "test_server_script_failure.py:" in message
    assert "ZeroDivisionError" in message
    assert "Traceback" not in message and "\n" not in message
