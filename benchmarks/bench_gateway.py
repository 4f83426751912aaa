"""Gateway overhead per non-compacting call: the same request through ``ctxpolicy serve``
minus a direct call to the same upstream, interleaved in one run.

The scripted upstream and the gateway run in processes of their own, the client here;
the real Claude Code request is captured at run time (skipped when Claude Code is not
installed). ``--baseline DIR``: that checkout's gateway too, interleaved. The section
says what each scenario sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (
    free_port,
    git_head,
    http_server,
    machine,
    markdown_table,
    parser,
    publish,
    scripted_upstream,
)

CONVERSATIONS = 50
#: calls: sequential, per concurrent conversation, large, own CPU; concurrent
#: conversations, warm-up calls, files Claude Code reads for the real request
FULL = (400, 40, 150, 400, CONVERSATIONS, 5, 40)
QUICK = (8, 2, 4, 5, 4, 1, 1)
BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test. " * 20},
    ],
}


#: The gateway process: the code of the checkout it runs from (its own tree first on
#: sys.path), the same policy and uvicorn settings for every checkout.
GATEWAY_CODE = """
import sys
from pathlib import Path
import uvicorn
from ctxpolicy.gateway.app import GatewayConfig, create_app
from tests.integrations.conftest import make_policy
port, upstream, tmp, http, loop = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
cfg = GatewayConfig(
    policies={"a": make_policy(Path(tmp), window=1_000_000)},
    upstream=upstream,
    default_agent="a",
    secret=b"bench",
)
uvicorn.run(
    create_app(cfg), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=75,
    http=http, loop=loop,
)
"""

ROOT = Path(__file__).resolve().parents[1]
CHAT = "/v1/chat/completions"


def server_impls(root: Path) -> tuple[str, str]:
    """The HTTP parser and event loop ``ctxpolicy serve`` of the checkout ``root`` runs on
    when installed from its own lock: httptools and uvloop when its lock has them (its
    ``--http``/``--loop`` auto), else uvicorn's pure-Python h11 on asyncio's loop. Every
    checkout's gateway runs in this interpreter, so a baseline whose lock lacks them is
    run as it would be installed, not with what this tree added."""
    lock = (root / "uv.lock").read_text() if (root / "uv.lock").exists() else ""
    http = "httptools" if 'name = "httptools"' in lock else "h11"
    loop = "uvloop" if 'name = "uvloop"' in lock else "asyncio"
    return http, loop


def _gateway(root: Path, upstream: str, tmp: str) -> Any:
    """The gateway of the checkout ``root`` in front of ``upstream``: its URL and pid."""
    port = free_port()
    os.makedirs(tmp, exist_ok=True)
    cmd = [sys.executable, "-c", GATEWAY_CODE, str(port), upstream, tmp, *server_impls(root)]
    return http_server(cmd, port, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})


def _large_body() -> dict[str, Any]:
    """A coding agent's Messages request: ~150 KB, 24 tools, 60 messages of history."""
    args = {f"arg{j}": {"type": "string", "description": "an argument " * 5} for j in range(6)}
    schema = {"type": "object", "properties": args, "required": ["arg0"]}
    about = "It does one careful thing. " * 30
    tools = [
        {"name": f"Tool{i}", "description": f"Tool number {i}. " + about, "input_schema": schema}
        for i in range(24)
    ]
    system = [{"type": "text", "text": "You are a coding agent. " + "Follow the rules. " * 1500}]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(30):
        use = {"type": "tool_use", "id": f"t{i}", "name": "Tool1", "input": {"arg0": i}}
        msgs.append(
            {"role": "assistant", "content": [{"type": "text", "text": f"Reading part {i}."}, use]}
        )
        out = "\n".join(f"{i}:{j} def function_{j}(x): return x * {j}" for j in range(30))
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": out}
        msgs.append({"role": "user", "content": [result]})
    return {"model": "m", "max_tokens": 1000, "system": system, "tools": tools, "messages": msgs}


LARGE = _large_body()

CLIENTS = Path(os.environ.get("CTXPOLICY_CLIENTS_DIR") or Path.home() / ".cache/ctxpolicy-clients")
REAL_BYTES = 150_000


def _claude_request(tmp: str, reads: int = 40) -> dict[str, Any] | None:
    """A real Claude Code ``/v1/messages`` request of about :data:`REAL_BYTES`: ``claude -p``
    reads files against a recording scripted server until its request is that long or it
    has read ``reads`` files (None when Claude Code is not installed)."""
    import hashlib

    from ctxpolicy.testing.server import ScriptedLLMServer

    exe = CLIENTS / "node_modules" / ".bin" / "claude"
    if not exe.exists():
        return None
    root = Path(tmp) / "claude"
    (root / "home").mkdir(parents=True, exist_ok=True)
    for i in range(40):
        lines = (f"line {j} of file {i}: value_{i}_{j} " + "x" * 40 for j in range(100))
        (root / f"big{i}.txt").write_text("\n".join(lines) + "\n")
    bodies: list[dict[str, Any]] = []

    def script(body: dict[str, Any], api: str) -> dict[str, Any]:
        if not body.get("tools"):
            return {"content": "ok"}
        bodies.append(body)
        n = len(bodies)
        if len(json.dumps(body)) >= REAL_BYTES or n >= reads:
            return {"content": "all files read"}
        text = f"Reading file {n}."
        return {
            "thinking": text,
            "signature": hashlib.sha256(text.encode()).hexdigest(),
            "tool_calls": [{"name": "Read", "arguments": {"file_path": str(root / f"big{n}.txt")}}],
        }

    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(root / "home"),
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    with ScriptedLLMServer(window=10_000_000, script=script) as srv:
        env["ANTHROPIC_BASE_URL"] = srv.url
        cmd = [str(exe), "-p", "Read the bigN.txt files one by one.", "--allowedTools", "Read"]
        subprocess.run(cmd, cwd=root, env=env, capture_output=True, timeout=600, check=False)
    return bodies[-1] if bodies else None


#: One checkout's gateway code replaying requests in process: CPU seconds per request
#: of what the gateway does between the body read and the upstream send.
OWN_CPU_CODE = """
import json, sys, tempfile, time
from pathlib import Path
from ctxpolicy.gateway.app import Gateway, GatewayConfig
from ctxpolicy.gateway.calls import parse, prepare_sync
from ctxpolicy.wire import for_api
from tests.integrations.conftest import make_policy
bodies, calls, warm = json.loads(sys.stdin.read()), int(sys.argv[1]), int(sys.argv[2])
gw = Gateway(GatewayConfig(policies={"a": make_policy(Path(tempfile.mkdtemp()), window=1_000_000)},
    upstream="http://127.0.0.1:9", default_agent="a", secret=b"bench"))
out = {}
for name, (api, body) in bodies.items():
    raw = json.dumps(body).encode()
    headers = {"x-ctxpolicy-conversation": name, "authorization": "Bearer bench"}
    if api == "anthropic":
        headers["anthropic-version"] = "2023-06-01"
    wire = for_api(api)
    def one():
        tenant = gw.identity.tenant(headers, server_key=False)
        p = parse(gw.identity, raw, api, "a", tenant, headers, True)
        s = gw.pool.get("a", p.conversation.id)
        d = prepare_sync(s, p.req.messages, p.req.tools)
        return wire.build(p.req, d.messages, None)
    for _ in range(warm):
        one()
    times = []
    for _ in range(calls):
        t0 = time.process_time()
        one()
        times.append(time.process_time() - t0)
    out[name] = times
gw.pool.close()
print(json.dumps(out))
"""


def _own_cpu(
    root: Path, bodies: dict[str, tuple[str, Any]], calls: int, warm: int = 10
) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", OWN_CPU_CODE, str(calls), str(warm)],
        input=json.dumps(bodies),
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    return {k: list(v) for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}


async def _call(
    c: httpx.AsyncClient, url: str, conv: str, stream: bool, large: Any = False
) -> float:
    """Seconds to the whole answer (or, streaming, to its first body byte); ``large``: the
    JSON bytes of a Messages request to send instead of the small chat request."""
    headers = {"x-ctxpolicy-conversation": conv, "authorization": "Bearer bench"}
    t0 = time.perf_counter()
    if not stream:
        if large:
            headers |= {"anthropic-version": "2023-06-01", "content-type": "application/json"}
        path, send = ("/v1/messages", {"content": large}) if large else (CHAT, {"json": BODY})
        r = await c.post(url + path, headers=headers, **send)
        dt = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        return dt
    async with c.stream("POST", url + CHAT, json={**BODY, "stream": True}, headers=headers) as r:
        assert r.status_code == 200
        dt = -1.0
        async for _ in r.aiter_raw():
            if dt < 0:
                dt = time.perf_counter() - t0
    return dt


async def _conversation(
    c: httpx.AsyncClient, urls: list[str], conv: str, calls: int, stream: bool, large: Any
) -> list[list[float]]:
    """Seconds per call for each url (direct first), the order rotating every call."""
    out: list[list[float]] = [[] for _ in urls]
    for i in range(calls):
        for k in range(len(urls)):
            j = (i + k) % len(urls)
            out[j].append(await _call(c, urls[j], conv, stream, large))
    return out


async def _scenario(
    urls: list[str],
    conversations: int,
    calls: int,
    pids: list[int],
    stream: bool = False,
    large: Any = False,
    warm: int = 5,
) -> tuple[list[float], list[tuple[list[float], float]]]:
    """Direct seconds per call, and for each gateway its seconds per call and CPU seconds
    per call (the warm-up calls, which open the conversations, left out)."""
    limits = httpx.Limits(max_connections=4 * conversations, max_keepalive_connections=None)
    convs = [f"bench-{stream}-{len(large) if large else 0}-{n}" for n in range(conversations)]
    async with httpx.AsyncClient(limits=limits, timeout=120) as c:
        await asyncio.gather(*(_conversation(c, urls, cv, warm, stream, large) for cv in convs))
        cpu0 = [_cpu(p) for p in pids]
        runs = await asyncio.gather(
            *(_conversation(c, urls, cv, calls, stream, large) for cv in convs)
        )
        cpu = [_cpu(p) - c0 for p, c0 in zip(pids, cpu0, strict=True)]
    per_url = [[x for run in runs for x in run[j]] for j in range(len(urls))]
    gws = [(per_url[j + 1], cpu[j] / len(per_url[j + 1])) for j in range(len(pids))]
    return per_url[0], gws


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) a process has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _q(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


def _row(direct: list[float], through: list[float], cpu: float) -> dict[str, float]:
    d50, g50 = statistics.median(direct), statistics.median(through)
    d99, g99 = _q(direct, 0.99), _q(through, 0.99)
    return {"d50": d50, "g50": g50, "d99": d99, "g99": g99, "n": len(through), "cpu": cpu}


def _line(name: str, r: dict[str, float]) -> list[str]:
    """A scenario's row: ms, the overheads in bold, the gateway's CPU per call."""
    d50, g50, d99, g99 = (r[k] * 1e3 for k in ("d50", "g50", "d99", "g99"))
    return [name, str(r["n"]), f"{d50:.2f}", f"{g50:.2f}", f"**{g50 - d50:.2f}**", f"{d99:.2f}",
            f"{g99:.2f}", f"**{g99 - d99:.2f}**", f"{g50 / d50:.2f}x", f"{r['cpu'] * 1e3:.2f}"]  # fmt: skip


def _own_cpu_data(
    labels: list[str], own: list[dict[str, list[float]]], names: dict[str, str]
) -> dict[str, Any]:
    """CPU seconds per request (median, p99) of each checkout's gateway code."""
    return {
        f"{name} [{label}]": {"cpu_p50": statistics.median(o[key]), "cpu_p99": _q(o[key], 0.99)}
        | {"n": len(own[0][key])}
        for key, name in names.items()
        if key in own[0]
        for label, o in zip(labels, own, strict=True)
    }


def _own_lines(labels: list[str], own: dict[str, Any]) -> list[list[str]]:
    """One row per request: p50 / p99 ms of each checkout (and their ratio)."""
    rows = []
    for name in dict.fromkeys(k.rsplit(" [", 1)[0] for k in own):
        cells = [own[f"{name} [{label}]"] for label in labels]
        rows.append(
            [name, *(f"{c['cpu_p50'] * 1e3:.3f} / {c['cpu_p99'] * 1e3:.3f}" for c in cells)]
        )
        rows[-1] += [f"{cells[0]['cpu_p50'] / cells[-1]['cpu_p50']:.1f}x"] if len(cells) > 1 else []
    return rows


def main() -> None:
    ap = parser(__doc__, "fewer calls (a smoke run)", baseline=True)
    ap.add_argument("--upstream-ms", type=float, default=100.0, help="model-like upstream time")
    args = ap.parse_args()
    # quick: a smoke run of every scenario (sizes in QUICK), not a measurement
    seq_calls, conc_calls, large_calls, own_calls = QUICK[:4] if args.quick else FULL[:4]
    convs, warm, reads = QUICK[4:] if args.quick else FULL[4:]
    roots = [args.baseline.resolve(), ROOT] if args.baseline else [ROOT]
    base_commit = git_head(args.baseline) if args.baseline else None
    labels = ["baseline", "this tree"] if args.baseline else ["gateway"]
    results: dict[str, Any] = {}
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        real = _claude_request(tmp, reads)
        real_bytes = json.dumps(real).encode() if real is not None else None
        real_name = (
            f"real Claude Code request, {len(real_bytes) // 1000} KB, "
            f"{len((real or {}).get('tools') or [])} tools, 1 conversation"
            if real_bytes
            else ""
        )
        print(f"real request: {real_name or 'Claude Code not installed, skipped'}", flush=True)
        bodies: dict[str, tuple[str, Any]] = {
            "small": ("chat", BODY),
            "large": ("anthropic", LARGE),
        }
        bodies |= {"real": ("anthropic", real)} if real is not None else {}
        own = [_own_cpu(root, bodies, own_calls, warm) for root in roots]
        # twice, interleaved (baseline, this tree, baseline, this tree): load drifts
        if len(roots) > 1:
            again = [_own_cpu(root, bodies, own_calls, warm) for root in roots]
            own = [{k: o[k] + a[k] for k in o} for o, a in zip(own, again, strict=True)]
        load.append(os.getloadavg())
        own_names = {
            "small": "small chat request (2 messages)",
            "large": "synthetic 150 KB Messages request, 24 tools",
            "real": real_name.removesuffix(", 1 conversation"),
        }
        own_data = _own_cpu_data(labels, own, own_names)
        for row in _own_lines(labels, own_data):
            print(" | ".join(row), flush=True)
        large_bytes = json.dumps(LARGE).encode()
        single = {  # one conversation: name, calls, streamed, the Messages request's bytes
            "sequential": ("sequential, 1 conversation", seq_calls, False, b""),
            "stream": ("streaming, time to first byte, 1 conversation", seq_calls, True, b""),
            "large": (f"{own_names['large']}, 1 conversation", large_calls, False, large_bytes),
            "claude": (real_name, large_calls, False, real_bytes or b""),
        }
        for delay, scenarios in (
            (0.0, ("sequential", "stream", "large", "claude", "concurrent")),
            (args.upstream_ms / 1e3, ("concurrent",)),
        ):
            with contextlib.ExitStack() as stack:  # the gateways stop first, then the upstream
                upstream, _ = stack.enter_context(scripted_upstream("done", delay))
                gws = [
                    stack.enter_context(
                        _gateway(root, upstream, os.path.join(tmp, f"d{delay}", str(i)))
                    )
                    for i, root in enumerate(roots)
                ]
                urls, pids = [upstream, *(u for u, _ in gws)], [p for _, p in gws]
                for sc in scenarios:
                    if sc == "concurrent":
                        name = f"{convs} concurrent conversations, upstream " + (
                            f"{args.upstream_ms:g} ms" if delay else "0 ms (saturation)"
                        )
                        run = _scenario(urls, convs, conc_calls, pids, warm=warm)
                    elif sc == "claude" and real_bytes is None:
                        continue
                    else:
                        name, calls, stream, large = single[sc]
                        run = _scenario(urls, 1, calls, pids, stream, large, warm)
                    d, gws_t = asyncio.run(run)
                    for label, (t, cpu) in zip(labels, gws_t, strict=True):
                        full = f"{name} [{label}]" if args.baseline else name
                        results[full] = _row(d, t, cpu)
                        print(" | ".join(_line(full, results[full])), flush=True)
            load.append(os.getloadavg())
    data = {"machine": machine(["ctxpolicy", "uvicorn", "httpx"]), "quick": args.quick}
    data |= {
        "upstream_ms": args.upstream_ms,
        "baseline": str(args.baseline) if args.baseline else None,
    }
    data |= {"baseline_commit": base_commit, "commit": git_head(ROOT)}
    data["server"] = {lb: list(server_impls(r)) for lb, r in zip(labels, roots, strict=True)}
    data |= {"load_avg_1m": [a for a, _, _ in load], "own_cpu": own_data, "scenarios": results}
    publish("bench_gateway", data, to_markdown(data))


def to_markdown(data: dict[str, Any]) -> str:
    labels, base, commit, quick = (
        list(data["server"]),
        data["baseline"],
        data["baseline_commit"],
        data["quick"],
    )
    seq_calls, conc_calls = (QUICK if quick else FULL)[:2]
    loads = ", ".join(f"{a:.2f}" for a in data["load_avg_1m"])
    own_head = " | ".join(f"{lb} p50 / p99" for lb in labels)
    impls = ", ".join(f"{lb} {'/'.join(impl)}" for lb, impl in data["server"].items())
    lines = [
        "## bench_gateway: overhead per non-compacting call (loopback)",
        f"1-minute load average at each stage of the run: {loads} (2 cores shared with "
        "other jobs: CPU times are the steadier measure).",
        "### The gateway's own CPU per request",
        "Each checkout's gateway code replays the request in a process of its own: "
        "reading the JSON body, the conversation's identity, the wire's conversion, "
        "`prepare` (token counts included) and building the outgoing body, everything "
        "but HTTP; CPU time (`time.process_time`) per request, ms"
        + (", both checkouts twice, interleaved" if base else "")
        + ".",
        markdown_table(
            f"request | {own_head}" + (" | baseline / this tree" if base else ""),
            _own_lines(labels, data["own_cpu"]),
        ),
        "### Through HTTP",
        "Gateway and scripted upstream in their own processes; direct and gateway calls "
        "interleaved per conversation, one pooled httpx client. ms; overhead = gateway − "
        "direct at the same quantile; gateway CPU per call = the gateway process's user + "
        "system time over the scenario / its calls (uvicorn's HTTP and the httpx client "
        "included)."
        + (f" Baseline: {base} (commit {commit}), interleaved with this tree." if base else "")
        + " HTTP parser and event loop of each gateway (as its checkout's lock installs "
        + f"them): {impls}."
        + (" (--quick)" if quick else ""),
        markdown_table(
            "scenario | calls | direct p50 | gateway p50 | overhead p50 | direct p99 | "
            "gateway p99 | overhead p99 | gateway/direct p50 | gateway CPU per call",
            [_line(name, r) for name, r in data["scenarios"].items()],
        ),
        "Reproduce: `.venv/bin/python -m benchmarks run gateway"
        + (
            f"{' --quick' if quick else ''} --baseline BASE` with BASE a checkout of "
            f"{commit} (`git worktree add --detach BASE {commit}`)"
            if base
            else "`"
        )
        + "; `--baseline OTHER_CHECKOUT` compares two checkouts in one run "
        f"({seq_calls} sequential calls, {conc_calls} per concurrent conversation"
        + ("" if quick else f"; `--quick`: {QUICK[0]} and {QUICK[1]}")
        + "). "
        "The real request is captured from Claude Code when it is installed "
        "(tests/gateway/test_real_clients.py installs it).",
    ]
    return "\n\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
