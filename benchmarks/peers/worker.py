"""A replay worker bound to one ctxpolicy source tree, for same-run comparisons.

``python -m benchmarks.peers.worker SRC`` imports ``ctxpolicy`` from ``SRC`` (another
checkout, e.g. main's tree: the baseline) and the benchmark code from this tree, then
answers one JSON request per stdin line with one JSON line on stdout:

* ``{"cmd": "replay", "trace": PATH, "agent": NAME}`` — seconds of ``prepare`` per
  model call and of ``add_tool_result`` booked per call
  (:func:`benchmarks.peers.timing.replay_ctxpolicy`);
* ``{"cmd": "parts", "trace": PATH, "agent": NAME, "repeat": N}`` — seconds of each
  part of the per-call path and of the floors (:func:`benchmarks.peers.parts.part_samples`).

The worker stays up between requests, so its caches warm up as an in-process
benchmark's do; :class:`Worker` drives it from the parent.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["PipeWorker", "Worker"]


class PipeWorker:
    """A child process answering one JSON line on stdout per JSON request on stdin."""

    def __init__(
        self, cmd: list[str], *, name: str, cwd: str | Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(self, **request: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.name}: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


class Worker(PipeWorker):
    """A worker process for the ctxpolicy of ``src``."""

    def __init__(self, src: str | Path) -> None:
        self.src = str(Path(src).resolve())
        env = {**os.environ, "PYTHONPATH": self.src}
        cmd = [sys.executable, "-m", "benchmarks.peers.worker", self.src]
        super().__init__(cmd, name=f"worker for {self.src}", cwd=ROOT, env=env)


def _serve(src: str) -> None:
    # ctxpolicy from SRC; the benchmark code (and nothing else) from this tree
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]
    sys.path.insert(0, src)
    import ctxpolicy

    where = Path(ctxpolicy.__file__).resolve()
    if not where.is_relative_to(Path(src)):
        raise SystemExit(f"ctxpolicy imported from {where}, not from {src}")
    sys.path[0] = str(ROOT)  # ctxpolicy's own modules now come from ctxpolicy.__path__
    from benchmarks._inputs import load_agent
    from benchmarks.peers.parts import part_samples
    from benchmarks.peers.replay import replay_ctxpolicy
    from ctxpolicy.sim.replay import load_trace

    policies: dict[str, Any] = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            agent = req["agent"]
            if agent not in policies:
                policies[agent] = load_agent(agent)[0]
            policy = policies[agent]
            msgs = load_trace(req["trace"])
            if req["cmd"] == "replay":
                prep, tools = replay_ctxpolicy(policy, msgs)
                answer: dict[str, Any] = {"prepare": prep, "add_tool_result": tools}
            elif req["cmd"] == "parts":
                answer = part_samples(policy, msgs, req.get("repeat", 1))
            else:
                answer = {"error": f"unknown command {req['cmd']!r}"}
        except Exception as exc:  # reported to the parent, which raises
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(str(Path(sys.argv[1]).resolve()))
