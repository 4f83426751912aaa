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
* ``stream``: time to the first body byte of a streamed answer, gateway minus direct.

    python benchmarks/bench_gateway.py [--quick] [--upstream-ms 100]

Writes benchmarks/results/bench_gateway.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import socket
import statistics
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


def _run_gateway(port: int, upstream: str, tmp: str) -> None:
    import uvicorn

    from ctxpolicy.gateway.app import GatewayConfig, create_app
    from tests.integrations.conftest import make_policy

    cfg = GatewayConfig(
        policies={"a": make_policy(Path(tmp), window=1_000_000)},
        upstream=upstream,
        default_agent="a",
        secret=b"bench",
    )
    uvicorn.run(
        create_app(cfg), host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=75
    )


def _start(delay: float, tmp: str) -> tuple[list[mp.Process], str, str]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    up = ctx.Process(target=_run_upstream, args=(q, delay), daemon=True)
    up.start()
    upstream = f"http://127.0.0.1:{q.get(timeout=60)}"
    port = _free_port()
    gw = ctx.Process(target=_run_gateway, args=(port, upstream, tmp), daemon=True)
    gw.start()
    gateway = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(gateway + "/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.05)
    return [gw, up], upstream, gateway


async def _call(c: httpx.AsyncClient, url: str, conv: str, stream: bool) -> float:
    """Seconds to the whole answer (or, streaming, to its first body byte)."""
    headers = {"x-ctxpolicy-conversation": conv, "authorization": "Bearer bench"}
    body = {**BODY, "stream": True} if stream else BODY
    t0 = time.perf_counter()
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
    c: httpx.AsyncClient, urls: tuple[str, str], conv: str, calls: int, stream: bool
) -> tuple[list[float], list[float]]:
    direct: list[float] = []
    through: list[float] = []
    for i in range(calls):
        order = ((urls[0], direct), (urls[1], through))
        for url, out in order if i % 2 else order[::-1]:
            out.append(await _call(c, url, conv, stream))
    return direct, through


async def _scenario(
    urls: tuple[str, str], conversations: int, calls: int, gw_pid: int, stream: bool = False
) -> tuple[list[float], list[float], float]:
    """Direct and gateway seconds per call, and the gateway's CPU seconds per call (the
    warm-up calls, which open the conversations, left out of all three)."""
    limits = httpx.Limits(max_connections=4 * conversations, max_keepalive_connections=None)
    convs = [f"bench-{stream}-{n}" for n in range(conversations)]
    async with httpx.AsyncClient(limits=limits, timeout=120) as c:
        await asyncio.gather(*(_conversation(c, urls, cv, 5, stream) for cv in convs))
        cpu0 = _cpu(gw_pid)
        runs = await asyncio.gather(*(_conversation(c, urls, cv, calls, stream) for cv in convs))
        cpu = _cpu(gw_pid) - cpu0
    through = [x for _, t in runs for x in t]
    return [x for d, _ in runs for x in d], through, cpu / len(through)


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
    args = ap.parse_args()
    seq_calls = 200 if args.quick else 400
    conc_calls = 8 if args.quick else 40
    rows: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for delay, scenarios in (
            (0.0, ("sequential", "stream", "concurrent")),
            (args.upstream_ms / 1e3, ("concurrent",)),
        ):
            procs, upstream, gateway = _start(delay, os.path.join(tmp, f"d{delay}"))
            try:
                pid = procs[0].pid or 0
                for sc in scenarios:
                    if sc == "sequential":
                        d, t, cpu = asyncio.run(_scenario((upstream, gateway), 1, seq_calls, pid))
                        name = "sequential, 1 conversation"
                    elif sc == "stream":
                        d, t, cpu = asyncio.run(
                            _scenario((upstream, gateway), 1, seq_calls, pid, True)
                        )
                        name = "streaming, time to first byte, 1 conversation"
                    else:
                        d, t, cpu = asyncio.run(
                            _scenario((upstream, gateway), CONVERSATIONS, conc_calls, pid)
                        )
                        name = f"{CONVERSATIONS} concurrent conversations, upstream " + (
                            f"{args.upstream_ms:g} ms" if delay else "0 ms (saturation)"
                        )
                    line, results[name] = _row(name, d, t, cpu)
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
        "system time over the scenario / its calls." + (" (--quick)" if args.quick else ""),
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
    data["scenarios"] = results
    publish("bench_gateway", data, text)


if __name__ == "__main__":
    main()
