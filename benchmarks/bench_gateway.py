"""Gateway overhead per non-compacting call: the same request through ``ctxpolicy serve``
minus a direct call to the same upstream, interleaved in one run.

The scripted upstream and the gateway (uvicorn, sqlite state) each run in their own
process; the client is this process (one asyncio loop, one pooled httpx client for both
paths, so direct and gateway calls are measured the same way). Scenarios:

* ``sequential``: one conversation, one call at a time;
* ``concurrent``: 50 conversations at once, each its own ``X-Ctxpolicy-Conversation``,
  every conversation alternating gateway and direct calls; once with an upstream that
  answers at once (saturation: the gateway's queueing is in the overhead) and once with
  an upstream that takes ``--upstream-ms`` per answer, as a model does;
* ``stream``: time to the first body byte of a streamed answer, gateway minus direct;
* ``large``: a coding agent's request (~150 KB: a long system prompt, 24 tools, 60
  messages of tool history) on the Anthropic route, one conversation.

With ``--baseline DIR`` (another checkout, e.g. ``/work/main``) a second gateway runs
that checkout's code against the same upstream, and every conversation interleaves
direct, baseline and this tree's calls, so the two gateways are compared in one run.

    python benchmarks/bench_gateway.py [--quick] [--upstream-ms 100] [--baseline DIR]

Writes benchmarks/results/bench_gateway.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import header_markdown, machine, publish

CONVERSATIONS = 50
BODY = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test. " * 20},
    ],
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_upstream(port_out: Any, delay: float) -> None:
    from ctxpolicy.testing.server import ScriptedLLMServer

    def script(body: dict[str, Any]) -> dict[str, Any]:
        if delay:
            time.sleep(delay)
        return {"content": "done"}

    with ScriptedLLMServer(window=1_000_000, script=script) as srv:
        port_out.put(srv.port)
        while True:
            time.sleep(3600)


#: The gateway process: the code of the checkout it runs from (its own tree first on
#: sys.path), the same policy and uvicorn settings for every checkout.
GATEWAY_CODE = """
import sys
from pathlib import Path
import uvicorn
from ctxpolicy.gateway.app import GatewayConfig, create_app
from tests.integrations.conftest import make_policy
port, upstream, tmp = int(sys.argv[1]), sys.argv[2], sys.argv[3]
cfg = GatewayConfig(
    policies={"a": make_policy(Path(tmp), window=1_000_000)},
    upstream=upstream,
    default_agent="a",
    secret=b"bench",
)
uvicorn.run(
    create_app(cfg), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=75
)
"""

ROOT = Path(__file__).resolve().parents[1]


class _Proc:
    """A started process with a pid and a terminate/join like multiprocessing's."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self.popen = popen
        self.pid = popen.pid

    def terminate(self) -> None:
        self.popen.terminate()

    def join(self, timeout: float) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()


def _gateway(root: Path, upstream: str, tmp: str) -> tuple[_Proc, str]:
    port = _free_port()
    os.makedirs(tmp, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(root)}
    popen = subprocess.Popen(
        [sys.executable, "-c", GATEWAY_CODE, str(port), upstream, tmp], cwd=root, env=env
    )
    gateway = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(gateway + "/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or popen.poll() is not None:
            raise RuntimeError(f"the gateway of {root} did not start")
        time.sleep(0.05)
    return _Proc(popen), gateway


def _start(delay: float, tmp: str, roots: list[Path]) -> tuple[list[Any], str, list[str]]:
    """The upstream, then one gateway per checkout in ``roots``."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    up = ctx.Process(target=_run_upstream, args=(q, delay), daemon=True)
    up.start()
    upstream = f"http://127.0.0.1:{q.get(timeout=60)}"
    procs: list[Any] = []
    gateways: list[str] = []
    for i, root in enumerate(roots):
        proc, url = _gateway(root, upstream, os.path.join(tmp, str(i)))
        procs.append(proc)
        gateways.append(url)
    return [*procs, up], upstream, gateways


def _large_body() -> dict[str, Any]:
    """A coding agent's Messages request: ~150 KB, 24 tools, 60 messages of history."""
    tools = [
        {
            "name": f"Tool{i}",
            "description": f"Tool number {i}. " + "It does one careful thing. " * 30,
            "input_schema": {
                "type": "object",
                "properties": {
                    f"arg{j}": {"type": "string", "description": "an argument " * 5}
                    for j in range(6)
                },
                "required": ["arg0"],
            },
        }
        for i in range(24)
    ]
    system = [{"type": "text", "text": "You are a coding agent. " + "Follow the rules. " * 1500}]
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    for i in range(30):
        msgs.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading part {i}."},
                    {"type": "tool_use", "id": f"t{i}", "name": "Tool1", "input": {"arg0": i}},
                ],
            }
        )
        out = "\n".join(f"{i}:{j} def function_{j}(x): return x * {j}" for j in range(30))
        msgs.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": out}],
            }
        )
    return {"model": "m", "max_tokens": 1000, "system": system, "tools": tools, "messages": msgs}


LARGE = _large_body()


async def _call(
    c: httpx.AsyncClient, url: str, conv: str, stream: bool, large: bool = False
) -> float:
    """Seconds to the whole answer (or, streaming, to its first body byte)."""
    headers = {"x-ctxpolicy-conversation": conv, "authorization": "Bearer bench"}
    body = {**BODY, "stream": True} if stream else BODY
    t0 = time.perf_counter()
    if large:
        headers["anthropic-version"] = "2023-06-01"
        r = await c.post(url + "/v1/messages", json=LARGE, headers=headers)
        dt = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        return dt
    if not stream:
        r = await c.post(url + "/v1/chat/completions", json=body, headers=headers)
        dt = time.perf_counter() - t0
        assert r.status_code == 200, r.text
        return dt
    async with c.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
        assert r.status_code == 200
        dt = -1.0
        async for _ in r.aiter_raw():
            if dt < 0:
                dt = time.perf_counter() - t0
    return dt


async def _conversation(
    c: httpx.AsyncClient, urls: list[str], conv: str, calls: int, stream: bool, large: bool
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
    large: bool = False,
) -> tuple[list[float], list[tuple[list[float], float]]]:
    """Direct seconds per call, and for each gateway its seconds per call and CPU seconds
    per call (the warm-up calls, which open the conversations, left out)."""
    limits = httpx.Limits(max_connections=4 * conversations, max_keepalive_connections=None)
    convs = [f"bench-{stream}-{large}-{n}" for n in range(conversations)]
    async with httpx.AsyncClient(limits=limits, timeout=120) as c:
        await asyncio.gather(*(_conversation(c, urls, cv, 5, stream, large) for cv in convs))
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


def _row(
    name: str, direct: list[float], through: list[float], cpu: float
) -> tuple[str, dict[str, float]]:
    d50, g50 = statistics.median(direct), statistics.median(through)
    d99, g99 = _q(direct, 0.99), _q(through, 0.99)
    r = {"d50": d50, "g50": g50, "d99": d99, "g99": g99, "n": len(through)}
    line = (
        f"| {name} | {len(through)} | {d50 * 1e3:.2f} | {g50 * 1e3:.2f} | "
        f"**{(g50 - d50) * 1e3:.2f}** | {d99 * 1e3:.2f} | {g99 * 1e3:.2f} | "
        f"**{(g99 - d99) * 1e3:.2f}** | {g50 / d50:.2f}x | {cpu * 1e3:.2f} |"
    )
    return line, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer calls (a smoke run)")
    ap.add_argument("--upstream-ms", type=float, default=100.0, help="model-like upstream time")
    ap.add_argument(
        "--baseline", type=Path, default=None, help="another checkout to compare in the same run"
    )
    args = ap.parse_args()
    seq_calls = 200 if args.quick else 400
    conc_calls = 8 if args.quick else 40
    large_calls = 50 if args.quick else 150
    roots = [args.baseline.resolve(), ROOT] if args.baseline else [ROOT]
    labels = ["baseline", "this tree"] if args.baseline else ["gateway"]
    rows: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for delay, scenarios in (
            (0.0, ("sequential", "stream", "large", "concurrent")),
            (args.upstream_ms / 1e3, ("concurrent",)),
        ):
            procs, upstream, gateways = _start(delay, os.path.join(tmp, f"d{delay}"), roots)
            urls = [upstream, *gateways]
            try:
                pids = [p.pid or 0 for p in procs[: len(gateways)]]
                for sc in scenarios:
                    if sc == "sequential":
                        d, gws = asyncio.run(_scenario(urls, 1, seq_calls, pids))
                        name = "sequential, 1 conversation"
                    elif sc == "stream":
                        d, gws = asyncio.run(_scenario(urls, 1, seq_calls, pids, True))
                        name = "streaming, time to first byte, 1 conversation"
                    elif sc == "large":
                        d, gws = asyncio.run(_scenario(urls, 1, large_calls, pids, large=True))
                        name = "150 KB Messages request, 24 tools, 1 conversation"
                    else:
                        d, gws = asyncio.run(_scenario(urls, CONVERSATIONS, conc_calls, pids))
                        name = f"{CONVERSATIONS} concurrent conversations, upstream " + (
                            f"{args.upstream_ms:g} ms" if delay else "0 ms (saturation)"
                        )
                    for label, (t, cpu) in zip(labels, gws, strict=True):
                        full = f"{name} [{label}]" if args.baseline else name
                        line, results[full] = _row(full, d, t, cpu)
                        rows.append(line)
                        print(line, flush=True)
            finally:
                for p in procs:
                    p.terminate()
                    p.join(10)
    info = machine(["ctxpolicy", "uvicorn", "httpx"])
    lines = [
        "## bench_gateway: overhead per non-compacting call (loopback)",
        "",
        header_markdown(info),
        "",
        "Gateway and scripted upstream in their own processes; direct and gateway calls "
        "interleaved per conversation, one pooled httpx client. ms; overhead = gateway − "
        "direct at the same quantile; gateway CPU per call = the gateway process's user + "
        "system time over the scenario / its calls."
        + (f" Baseline: {args.baseline}, interleaved with this tree." if args.baseline else "")
        + (" (--quick)" if args.quick else ""),
        "",
        "| scenario | calls | direct p50 | gateway p50 | overhead p50 | direct p99 | "
        "gateway p99 | overhead p99 | gateway/direct p50 | gateway CPU per call |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "Reproduce: `.venv/bin/python benchmarks/bench_gateway.py` (`--quick`: "
        f"{seq_calls} sequential calls, {conc_calls} per concurrent conversation).",
    ]
    text = "\n".join(lines) + "\n"
    data = {"machine": info, "quick": args.quick, "upstream_ms": args.upstream_ms}
    data["baseline"] = str(args.baseline) if args.baseline else None
    data["scenarios"] = results
    publish("bench_gateway", data, text)


if __name__ == "__main__":
    main()
