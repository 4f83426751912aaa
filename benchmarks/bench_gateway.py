"""Gateway overhead per non-compacting call: the same request through ``ctxpolicy serve``
(real uvicorn on loopback, scripted upstream) minus a direct call to the same upstream,
interleaved in one run (sequential, one client; the 50-conversation load is not here yet).

Writes benchmarks/results/bench_gateway.md.
"""

from __future__ import annotations

import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxpolicy.gateway.app import GatewayConfig, create_app
from ctxpolicy.testing.server import ScriptedLLMServer
from tests.integrations.conftest import make_policy

CALLS = 300


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, ScriptedLLMServer(window=100_000) as srv:
        cfg = GatewayConfig(
            policies={"a": make_policy(Path(tmp), window=100_000)},
            upstream=srv.url, default_agent="a", secret=b"bench",
        )  # fmt: skip
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(create_app(cfg), port=port, log_level="warning"))
        threading.Thread(target=server.run, daemon=True).start()
        while not server.started:
            time.sleep(0.01)
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": "Fix the failing test. " * 20},
            ],
        }
        direct, through = [], []
        with httpx.Client() as c:
            for i in range(CALLS + 20):
                for url, out in (
                    (srv.url, direct),
                    (f"http://127.0.0.1:{port}", through),
                )[:: 1 if i % 2 else -1]:
                    t0 = time.perf_counter()
                    r = c.post(url + "/v1/chat/completions", json=body)
                    dt = time.perf_counter() - t0
                    assert r.status_code == 200, r.text
                    if i >= 20:  # warm-up
                        out.append(dt)
        server.should_exit = True
    d_med, g_med = statistics.median(direct), statistics.median(through)
    q = lambda xs: sorted(xs)[int(0.99 * len(xs)) - 1]  # noqa: E731
    lines = [
        "# bench_gateway: overhead per non-compacting call (sequential, loopback)",
        "",
        f"{CALLS} calls each, interleaved; the upstream is the scripted server.",
        "",
        "| | median ms | p99 ms |",
        "|---|---|---|",
        f"| direct to the upstream | {d_med * 1e3:.2f} | {q(direct) * 1e3:.2f} |",
        f"| through the gateway | {g_med * 1e3:.2f} | {q(through) * 1e3:.2f} |",
        f"| overhead (gateway - direct) | {(g_med - d_med) * 1e3:.2f} | {(q(through) - q(direct)) * 1e3:.2f} |",
        "",
        f"ratio gateway/direct (median): {g_med / d_med:.2f}x",
    ]
    text = "\n".join(lines) + "\n"
    (Path(__file__).resolve().parent / "results" / "bench_gateway.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
