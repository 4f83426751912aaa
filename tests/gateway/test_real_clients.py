"""The real coding agents through the gateway: Claude Code (``claude -p``), the Codex CLI
(``codex exec``), opencode (``opencode run``) and aider (``aider --message``), each run
non-interactively against the project's scripted server on loopback, reading large files
until the gateway compacts. With ``--recall`` on, the scripted model of Claude Code,
Codex and opencode calls ``ctx_recall`` once per session (after a thinking block for
Claude Code) on the first snapshot reference it sees: the gateway answers it and the
client never sees the call.

The clients are installed once into a cache folder (``CTXPOLICY_CLIENTS_DIR``, default
``~/.cache/ctxpolicy-clients``): the npm packages at the versions below and aider in a
virtualenv of its own. Without a reachable registry the tests are skipped with the
reason (failed under ``CI``). The whole module takes about two minutes once installed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from ctxpolicy.gateway.app import GatewayConfig
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import make_policy

from .conftest import run_gateway

NPM_PACKAGES = {
    "@openai/codex": "0.171.0",
    "@anthropic-ai/claude-code": "2.1.197",
    "opencode-ai": "1.18.33",
}
AIDER = "aider-chat==0.86.2"
CLIENTS = Path(os.environ.get("CTXPOLICY_CLIENTS_DIR") or Path.home() / ".cache/ctxpolicy-clients")
INSTALL_TIMEOUT = 600
RUN_TIMEOUT = 240
WINDOW, RESERVE = 30_000, 2_000  # the agents' policy: Claude Code's prefix is ~16k of it
CODEX_WINDOW = 16_000  # Codex's prefix is ~5.5k tokens, and it cuts long outputs itself
FILES = 16  # files each session reads (~8.8k tokens each, head_tail-cut by the tool rule as they arrive): compaction near the end
PROMPT = "Read every bigN.txt file in this directory and tell me what they hold."
SNAP_REF = re.compile(r"ctxsnap://[^\s)\"\\\]]+")


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


def _npm_bin(name: str) -> Path:
    return CLIENTS / "node_modules" / ".bin" / name


def _installed(package: str, version: str) -> bool:
    meta = CLIENTS / "node_modules" / package / "package.json"
    try:
        return bool(json.loads(meta.read_text()).get("version") == version)
    except (OSError, ValueError):
        return False


@pytest.fixture(scope="module")
def npm_clients() -> Path:
    """The Codex CLI, Claude Code and opencode, installed with npm into the cache folder."""
    if not all(_installed(p, v) for p, v in NPM_PACKAGES.items()):
        npm = shutil.which("npm")
        if npm is None:
            _unavailable("npm is not installed")
        CLIENTS.mkdir(parents=True, exist_ok=True)
        specs = [f"{p}@{v}" for p, v in NPM_PACKAGES.items()]
        try:
            done = subprocess.run(
                [str(npm), "install", "--no-audit", "--no-fund", "--prefix", str(CLIENTS), *specs],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            _unavailable(f"npm install {' '.join(specs)} took over {INSTALL_TIMEOUT} s")
        if done.returncode != 0:
            _unavailable(f"npm could not install {' '.join(specs)}: {done.stderr[-400:]}")
    return CLIENTS


@pytest.fixture(scope="module")
def aider_bin() -> Path:
    """aider in a virtualenv of its own in the cache folder."""
    venv = CLIENTS / "aider-venv"
    exe = venv / "bin" / "aider"
    if not exe.exists():
        try:
            subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True
            )
            done = subprocess.run(
                [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", AIDER],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
            )
        except subprocess.TimeoutExpired:
            _unavailable(f"pip install {AIDER} took over {INSTALL_TIMEOUT} s")
        except subprocess.CalledProcessError as exc:
            _unavailable(f"could not create a virtualenv for aider: {exc}")
        if done.returncode != 0 or not exe.exists():
            _unavailable(f"pip could not install {AIDER}: {done.stderr[-400:]}")
    return exe


@dataclass
class Run:
    """What one client run left: its outputs, the upstream's records, the gateway's view."""

    outputs: list[subprocess.CompletedProcess[str]]
    records: list[Any]
    conversations: list[tuple[str, str]]
    metrics: str
    thinking: dict[str, str] = field(default_factory=dict)  # text -> signature sent
    traces: list[Path] = field(default_factory=list)  # the client's messages (--record)
    recalled: dict[str, str] = field(default_factory=dict)  # session -> recall answer seen


class Recaller:
    """The scripted model's side of recall: once per session, on the first snapshot
    reference in a request, a ``ctx_recall`` call of it; the answer the gateway sends
    back in the next request is kept (the client never sees either)."""

    def __init__(self) -> None:
        self.asked: dict[str, str] = {}  # session -> the call's id
        self.answers: dict[str, str] = {}
        self.lock = threading.Lock()

    def call(self, session: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """The recall call to answer with, or None (asked already, or nothing to recall)."""
        with self.lock:
            if session in self.asked:
                return None
        names = {
            t.get("name") or (t.get("function") or {}).get("name") for t in body.get("tools") or []
        }
        if "ctx_recall" not in names:
            return None
        found = SNAP_REF.search(json.dumps(body.get("messages") or body.get("input") or []))
        if found is None:
            return None
        cid = f"recall_{hashlib.sha256(session.encode()).hexdigest()[:8]}"
        with self.lock:
            self.asked[session] = cid
        return {"name": "ctx_recall", "arguments": {"ref": found.group(0)}, "id": cid}

    def seen(self, session: str, results: dict[str, str]) -> None:
        """The tool results of a request, by call id: the recall answer among them."""
        with self.lock:
            cid = self.asked.get(session)
            if cid is None or session in self.answers:
                return
            for got, text in results.items():  # the Messages API's ids get a toolu_ prefix
                if got == cid or got.endswith("_" + cid):
                    self.answers[session] = text


def _anthropic_results(body: dict[str, Any]) -> dict[str, str]:
    out = {}
    for _, b in _blocks(body, "tool_result"):
        out[str(b.get("tool_use_id"))] = json.dumps(b.get("content"))
    return out


def _project(root: Path) -> Path:
    proj = root / "proj"
    proj.mkdir()
    for i in range(FILES + 2):
        lines = (f"line {j} of file {i}: value_{i}_{j} " + "x" * 40 for j in range(400))
        (proj / f"big{i}.txt").write_text("\n".join(lines) + "\n")
    return proj


def _policy_config(
    root: Path,
    srv: ScriptedLLMServer,
    agent: str,
    window: int = WINDOW,
    record: bool = False,
    recall: bool = False,
) -> GatewayConfig:
    policy = make_policy(
        root / "state", window=window, reserve_output=RESERVE, tool_growth=2000, safety_margin=500
    )
    return GatewayConfig(
        policies={agent: policy},
        upstream=srv.url,
        default_agent=agent,
        secret=b"real-clients",
        record=str(root / "traces") if record else None,
        recall=recall,
    )


def _parallel(commands: list[tuple[list[str], dict[str, str]]], cwd: Path) -> list[Any]:
    out: list[Any] = [None] * len(commands)

    def one(i: int) -> None:
        cmd, env = commands[i]
        out[i] = subprocess.run(
            cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
        )

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(commands))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RUN_TIMEOUT + 10)
    return out


def _env(root: Path, **extra: str) -> dict[str, str]:
    home = root / "home"
    home.mkdir(exist_ok=True)
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TMPDIR", "SSL_CERT_FILE")}
    return {**keep, "HOME": str(home), **extra}


# -- Claude Code ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude_run(npm_clients: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("claude")
    proj = _project(root)
    reads: dict[str, int] = {}
    produced: dict[str, str] = {}
    lock = threading.Lock()
    recaller = Recaller()

    def script(body: dict[str, Any], api: str) -> dict[str, Any]:
        if not body.get("tools"):
            return {"content": "ok"}  # a side request (a title, a check)
        try:
            session = json.loads(body["metadata"]["user_id"])["session_id"]
        except (KeyError, TypeError, ValueError):
            session = "?"
        recaller.seen(session, _anthropic_results(body))
        recall = recaller.call(session, body)
        if recall is not None:  # signed thinking first, as Claude models answer
            text = f"Session {session[:8]} recalls an earlier read."
            sig = hashlib.sha256(text.encode()).hexdigest()
            with lock:
                produced[text] = sig
            return {"thinking": text, "signature": sig, "tool_calls": [recall]}
        with lock:
            n = reads[session] = reads.get(session, 0) + 1
        if n > FILES:
            return {"content": "all files read"}
        text = f"Session {session[:8]} reads file {n}."
        sig = hashlib.sha256(text.encode()).hexdigest()
        with lock:
            produced[text] = sig
        path = str(proj / f"big{n}.txt")
        return {
            "thinking": text,
            "signature": sig,
            "tool_calls": [{"name": "Read", "arguments": {"file_path": path}}],
        }

    with ScriptedLLMServer(window=200_000, script=script) as srv:
        config = _policy_config(root, srv, "claude_code", record=True, recall=True)
        with run_gateway(config) as gw:
            env = _env(
                root,
                ANTHROPIC_BASE_URL=gw.url,
                ANTHROPIC_API_KEY="sk-ant-test",
                DISABLE_TELEMETRY="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            )
            cmd = [
                str(_npm_bin("claude")),
                "-p",
                PROMPT,
                "--allowedTools",
                "Read",
                "--max-turns",
                str(FILES + 3),
            ]
            outputs = _parallel([(cmd, env), (cmd, env)], proj)
            # `claude -p --continue` resumes the latest session: its own conversation still
            conv_before = list(gw.gateway.pool.open_sessions)
            n_before = len(srv.records)
            more = [str(_npm_bin("claude")), "-p", "--continue", "And now?"]
            outputs.append(
                subprocess.run(
                    more, cwd=proj, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
                )
            )
            metrics = httpx.get(gw.url + "/metrics").text
            convs = list(gw.gateway.pool.open_sessions)
        assert len(srv.records) > n_before and set(convs) == set(conv_before)
        run = Run(outputs, srv.records, convs, metrics, produced)
        run.traces = sorted((root / "traces").glob("*.jsonl"))
        run.recalled = dict(recaller.answers)
        yield run


def _blocks(body: dict[str, Any], kind: str) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for i, m in enumerate(body.get("messages") or []):
        content = m.get("content")
        if isinstance(content, list):
            out += [(i, b) for b in content if isinstance(b, dict) and b.get("type") == kind]
    return out


def _compactions(metrics: str) -> int:
    return sum(
        int(v)
        for v in re.findall(r"^ctxpolicy_gateway_compactions_total\{.*\} (\d+)$", metrics, re.M)
    )


def test_claude_code_works_fits_and_compacts(claude_run: Run) -> None:
    """Both sessions, and the `--continue` of one of them (the same conversation)."""
    for out in claude_run.outputs:
        assert out.returncode == 0, out.stderr[-2000:]
        assert "all files read" in out.stdout
    accepted = [r for r in claude_run.records if r.status == 200]
    assert accepted and len(accepted) == len(claude_run.records)  # none over the window
    assert all(r.tokens <= WINDOW - RESERVE for r in accepted)
    assert _compactions(claude_run.metrics) > 0


def test_claude_code_pairs_stay_whole(claude_run: Run) -> None:
    for r in claude_run.records:
        msgs = r.body.get("messages") or []
        uses = {(i, b["id"]) for i, b in _blocks(r.body, "tool_use")}
        results = {(i, b["tool_use_id"]) for i, b in _blocks(r.body, "tool_result")}
        for i, cid in uses:  # answered in the next message
            assert (i + 1, cid) in results, (i, cid)
        for i, cid in results:
            assert (i - 1, cid) in uses and msgs[i - 1]["role"] == "assistant"


def test_claude_code_parallel_sessions_stay_apart(claude_run: Run) -> None:
    assert len(claude_run.conversations) == 2
    for r in claude_run.records:  # no request holds another session's reads
        sessions = {b.get("thinking", "")[8:16] for _, b in _blocks(r.body, "thinking")}
        assert len(sessions) <= 1


def test_claude_code_thinking_signatures_unchanged(claude_run: Run) -> None:
    seen = 0
    for r in claude_run.records:
        for _, b in _blocks(r.body, "thinking"):
            assert claude_run.thinking.get(b["thinking"]) == b["signature"]
            seen += 1
    assert seen


def test_claude_code_recall_after_thinking_is_answered(claude_run: Run) -> None:
    """With --recall, each session's model thinks, then calls ctx_recall (a streamed
    answer, as Claude Code asks for): the gateway answers it with the original file
    text, and Claude Code never sees the call."""
    assert len(claude_run.recalled) == 2
    for answer in claude_run.recalled.values():
        assert re.search(r"line \d+ of file \d+", answer), answer[:300]
    assert "ctxpolicy_gateway_recall_rounds_total" in claude_run.metrics
    for out in claude_run.outputs:
        assert "ctx_recall" not in out.stdout and "No such tool" not in out.stdout


def test_claude_code_system_messages_stay_in_place(claude_run: Run) -> None:
    """Claude Code sends reminders as `role: system` messages inside `messages`: they
    reach the provider in their place in the conversation, never moved into the
    top-level system prompt (which would break the prompt cache from there)."""
    from ctxpolicy.sim.importers import load_trace

    late: list[str] = []
    for trace in claude_run.traces:
        msgs = load_trace(trace)
        late += [_first_text(m["content"]) for m in msgs[1:] if m["role"] == "system"]
    assert late  # the client does send them
    bodies = [r.body for r in claude_run.records if r.body.get("tools")]
    tops = [json.dumps(b.get("system")) for b in bodies]
    inlines = [json.dumps(b["messages"]) for b in bodies]
    for text in set(late):  # a reminder of a later turn is only in the requests after it
        snippet = json.dumps(text)[1:80]
        assert not any(snippet in top for top in tops)
        assert any(snippet in inline for inline in inlines)


def _first_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            return str(part["text"])
    return ""


# -- Codex CLI --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def codex_run(npm_clients: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("codex")
    proj = _project(root)
    reads: dict[str, int] = {}
    lock = threading.Lock()
    recaller = Recaller()

    def script(body: dict[str, Any], api: str) -> dict[str, Any]:
        key = str(body.get("prompt_cache_key"))
        items = [it for it in body.get("input") or [] if isinstance(it, dict)]
        outputs = {
            str(it.get("call_id")): json.dumps(it.get("output"))
            for it in items
            if it.get("type") == "function_call_output"
        }
        recaller.seen(key, outputs)
        recall = recaller.call(key, body)
        if recall is not None:
            return {"tool_calls": [recall]}
        with lock:
            n = reads[key] = reads.get(key, 0) + 1
        if n > FILES:
            return {"content": "all files read"}
        names = {t.get("name") for t in body.get("tools") or []}
        if "exec_command" in names:
            call = {"name": "exec_command", "arguments": {"cmd": f"cat big{n}.txt"}}
        else:
            call = {"name": "shell", "arguments": {"command": ["cat", f"big{n}.txt"]}}
        return {"tool_calls": [call]}

    with ScriptedLLMServer(window=200_000, script=script) as srv:
        with run_gateway(_policy_config(root, srv, "codex", CODEX_WINDOW, recall=True)) as gw:
            codex_home = root / "codex-home"
            codex_home.mkdir()
            (codex_home / "config.toml").write_text(
                'model = "gpt-5"\nmodel_provider = "ctxpolicy"\n'
                "[model_providers.ctxpolicy]\n"
                'name = "ctxpolicy gateway"\n'
                f'base_url = "{gw.url}/v1"\n'
                'env_key = "OPENAI_API_KEY"\nwire_api = "responses"\n'
                "request_max_retries = 0\nstream_max_retries = 0\n"
            )
            env = _env(root, CODEX_HOME=str(codex_home), OPENAI_API_KEY="sk-test")
            cmd = [
                str(_npm_bin("codex")),
                "exec",
                "--skip-git-repo-check",
                "--sandbox",
                "danger-full-access",
                PROMPT,
            ]
            outputs = _parallel([(cmd, env), (cmd, env)], proj)
            metrics = httpx.get(gw.url + "/metrics").text
            convs = list(gw.gateway.pool.open_sessions)
        yield Run(outputs, srv.records, convs, metrics, recalled=dict(recaller.answers))


def test_codex_cli_works_through_the_gateway(codex_run: Run) -> None:
    for out in codex_run.outputs:
        assert out.returncode == 0, out.stderr[-2000:]
        assert "all files read" in out.stdout
    assert {r.path for r in codex_run.records} == {"/v1/responses"}
    assert len({r.body.get("prompt_cache_key") for r in codex_run.records}) == 2


def test_codex_cli_is_prepared_fits_and_compacts(codex_run: Run) -> None:
    """Two parallel `codex exec` with the same prompt: two conversations (Codex's session
    id), every request prepared and within the window, compaction ran, pairs whole."""
    assert len(codex_run.conversations) == 2
    assert 'api="responses",agent="codex",status="200"' in codex_run.metrics
    assert all(r.tokens <= CODEX_WINDOW - RESERVE for r in codex_run.records)
    assert _compactions(codex_run.metrics) > 0
    for r in codex_run.records:
        items = r.body["input"]
        calls = sorted(it["call_id"] for it in items if it.get("type") == "function_call")
        outs = sorted(it["call_id"] for it in items if it.get("type") == "function_call_output")
        assert calls == outs


def test_codex_cli_recall_is_answered(codex_run: Run) -> None:
    """With --recall, each session's model calls ctx_recall once (a streamed Responses
    answer): the gateway answers it; Codex never runs it."""
    assert len(codex_run.recalled) == 2
    for answer in codex_run.recalled.values():
        assert re.search(r"line \d+ of file \d+", answer), answer[:300]
    for out in codex_run.outputs:
        assert "ctx_recall" not in out.stdout + out.stderr


# -- opencode ---------------------------------------------------------------------------

OPENCODE_WINDOW = 30_000


@pytest.fixture(scope="module")
def opencode_run(npm_clients: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Two parallel `opencode run` with the same prompt, on the Chat Completions route (an
    OpenAI-compatible provider in opencode.json)."""
    root = tmp_path_factory.mktemp("opencode")
    proj = _project(root)
    tags = itertools.count()
    recaller = Recaller()

    def script(body: dict[str, Any], api: str) -> dict[str, Any]:
        if not body.get("tools"):
            return {"content": "A title"}  # opencode's title request
        msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        calls = [tc for m in msgs for tc in m.get("tool_calls") or []]
        # the session's tag rides in its tool call ids (the client sends them back)
        tag = str(calls[0]["id"]).split("_")[1] if calls else str(next(tags))
        recaller.seen(tag, {str(m.get("tool_call_id")): str(m.get("content")) for m in msgs})
        recall = recaller.call(tag, body)
        if recall is not None:
            return {"tool_calls": [recall]}
        last = [m for m in msgs if m.get("role") == "tool" and "of file" in str(m.get("content"))]
        done = re.findall(r"of file (\d+)", str(last[-1]["content"])) if last else []
        n = int(done[-1]) + 1 if done else 1
        if n > FILES:
            return {"content": "all files read"}
        path = str(proj / f"big{n}.txt")
        call = {"name": "read", "arguments": {"filePath": path}, "id": f"call_{tag}_{n}"}
        return {"tool_calls": [call]}

    with ScriptedLLMServer(window=200_000, script=script) as srv:
        config = _policy_config(root, srv, "opencode", OPENCODE_WINDOW, recall=True)
        with run_gateway(config) as gw:
            (proj / "opencode.json").write_text(
                json.dumps(
                    {
                        "$schema": "https://opencode.ai/config.json",
                        "provider": {
                            "ctxpolicy": {
                                "npm": "@ai-sdk/openai-compatible",
                                "name": "ctxpolicy gateway",
                                "options": {"baseURL": gw.url + "/v1", "apiKey": "sk-test"},
                                "models": {
                                    "gpt-4o": {
                                        "name": "gpt-4o",
                                        "tool_call": True,
                                        "limit": {"context": 200_000, "output": 4_000},
                                    }
                                },
                            }
                        },
                        "model": "ctxpolicy/gpt-4o",
                        "autoupdate": False,
                        "share": "disabled",
                    }
                )
            )
            # each session its own data folder: two opencode processes sharing one lock
            # its SQLite database ("database is locked"), nothing to do with the gateway
            envs = []
            for i in range(2):
                home = root / f"home{i}"
                envs.append(
                    _env(
                        root,
                        HOME=str(home),
                        OPENCODE_DISABLE_MODELS_FETCH="1",
                        OPENCODE_DISABLE_AUTOUPDATE="1",
                        XDG_CONFIG_HOME=str(home / ".config"),
                        XDG_DATA_HOME=str(home / ".local/share"),
                        XDG_CACHE_HOME=str(home / ".cache"),
                        XDG_STATE_HOME=str(home / ".local/state"),
                    )
                )
            cmd = [str(_npm_bin("opencode")), "run", PROMPT]
            outputs = _parallel([(cmd, e) for e in envs], proj)
            metrics = httpx.get(gw.url + "/metrics").text
            convs = list(gw.gateway.pool.open_sessions)
        yield Run(outputs, srv.records, convs, metrics, recalled=dict(recaller.answers))


def _chat_tags(body: dict[str, Any]) -> set[str]:
    ids = [
        str(tc.get("id"))
        for m in body.get("messages") or []
        for tc in m.get("tool_calls") or []
        if not str(tc.get("id")).startswith("recall_")
    ]
    return {i.split("_")[1] for i in ids if i.count("_") >= 2}


def test_opencode_works_fits_and_compacts(opencode_run: Run) -> None:
    for out in opencode_run.outputs:
        assert out.returncode == 0, (out.stdout[-1000:], out.stderr[-2000:])
        assert "all files read" in out.stdout
    chat = [r for r in opencode_run.records if r.body.get("tools")]
    assert chat and {r.path for r in chat} == {"/v1/chat/completions"}
    assert all(r.status == 200 and r.tokens <= OPENCODE_WINDOW - RESERVE for r in chat)
    assert 'api="chat",agent="opencode",status="200"' in opencode_run.metrics
    assert _compactions(opencode_run.metrics) > 0


def test_opencode_pairs_stay_whole(opencode_run: Run) -> None:
    for r in opencode_run.records:
        msgs = r.body.get("messages") or []
        for i, m in enumerate(msgs):
            if m.get("tool_calls"):
                answered = {x.get("tool_call_id") for x in msgs[i + 1 :] if x.get("role") == "tool"}
                assert {tc["id"] for tc in m["tool_calls"]} <= answered
            if m.get("role") == "tool":
                asked = {tc["id"] for x in msgs[:i] for tc in x.get("tool_calls") or []}
                assert m["tool_call_id"] in asked


def test_opencode_parallel_sessions_stay_apart(opencode_run: Run) -> None:
    tagged = [_chat_tags(r.body) for r in opencode_run.records]
    assert len(set().union(*tagged)) == 2  # two sessions reached the upstream
    assert all(len(t) <= 1 for t in tagged)  # no request holds the other's reads
    assert len(opencode_run.conversations) >= 2


def test_opencode_recall_is_answered(opencode_run: Run) -> None:
    assert len(opencode_run.recalled) == 2
    for answer in opencode_run.recalled.values():
        assert re.search(r"line \d+ of file \d+", answer), answer[:300]


# -- aider ------------------------------------------------------------------------------


def test_aider_works_fits_and_is_prepared(aider_bin: Path, tmp_path: Path) -> None:
    proj = _project(tmp_path)
    script = [{"content": "Nothing to change."}]
    with (
        ScriptedLLMServer(window=200_000, script=script) as srv,
        run_gateway(_policy_config(tmp_path, srv, "aider")) as gw,
    ):
        env = _env(
            tmp_path,
            OPENAI_API_BASE=gw.url + "/v1",
            OPENAI_API_KEY="sk-test",
            AIDER_CHECK_UPDATE="false",
            AIDER_ANALYTICS="false",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        cmd = [
            str(aider_bin),
            "--model",
            "openai/gpt-4o",
            "--no-git",
            "--yes-always",
            "--no-show-model-warnings",
            "--no-pretty",
            "--no-stream",
            "--message",
            "Summarise big1.txt.",
            "big1.txt",
        ]
        out = subprocess.run(
            cmd, cwd=proj, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
        )
        metrics = httpx.get(gw.url + "/metrics").text
        convs = list(gw.gateway.pool.open_sessions)
    assert out.returncode == 0, (out.stdout[-1000:], out.stderr[-2000:])
    assert "Nothing to change." in out.stdout
    chat = [r for r in srv.records if r.path.endswith("/chat/completions")]
    assert chat and all(r.status == 200 and r.tokens <= WINDOW - RESERVE for r in chat)
    assert len(convs) == 1
    assert 'api="chat",agent="aider",status="200"' in metrics
