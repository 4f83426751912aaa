"""A non-Python client: a Node script with the official ``openai`` npm package (installed
from the npm registry into a temp dir) against the gateway on a real uvicorn."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ctxpolicy.engine import Session
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import make_policy

from .conftest import config_for, run_gateway
from .test_app import RESERVE, WINDOW, history

SCRIPT = Path(__file__).with_name("node") / "client.mjs"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node/npm are not installed")
    d = tmp_path_factory.mktemp("node-openai")
    shutil.copy(SCRIPT, d / "client.mjs")
    (d / "package.json").write_text('{"name": "gw-node-test", "private": true, "type": "module"}')
    try:
        res = subprocess.run(
            [str(npm), "install", "--no-audit", "--no-fund", "--silent", "openai@4"],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=180,
        )
    except subprocess.TimeoutExpired:
        _unavailable("npm install openai timed out (registry unreachable?)")
    if res.returncode != 0:
        _unavailable(f"npm install openai failed (registry unreachable?): {res.stderr[-300:]}")
    return d


def test_node_openai_client_plain_and_streaming(tmp_path: Path, node_dir: Path) -> None:
    histories = [history(steps) for steps in range(1, 8)]
    with ScriptedLLMServer(window=WINDOW) as srv, run_gateway(config_for(tmp_path, srv)) as gw:
        res = subprocess.run(
            ["node", "client.mjs", gw.url + "/v1"],
            cwd=node_dir,
            input=json.dumps(histories),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        (key,) = list(gw.gateway.pool.open_sessions)
    out = json.loads(res.stdout)
    assert [o["plain"] for o in out] == ["done"] * len(histories)
    assert [o["streamed"] for o in out] == ["done"] * len(histories)
    assert all(o["chunks"] >= 3 for o in out)
    ref = Session(make_policy(tmp_path / "ref"), conv_id=key[1])
    got = [r.body["messages"] for r in srv.accepted]
    assert len(got) == 2 * len(histories)
    for i, msgs in enumerate(histories):
        want = ref.prepare(msgs)
        assert got[2 * i] == want  # the plain call
        assert got[2 * i + 1] == ref.prepare(msgs)  # the streamed one, same conversation
    assert srv.accepted[1].body["stream"] is True
    assert all(r.tokens <= WINDOW - RESERVE for r in srv.accepted)
