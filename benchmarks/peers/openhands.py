"""OpenHands' ``LLMSummarizingCondenser`` driven call by call over a recorded trace.

``openhands-sdk`` needs Python ≥ 3.12 and the benchmarks run on 3.11, so the library
runs in a virtualenv of its own (:func:`ensure_venv`: under the user's cache,
``~/.cache/ctxpolicy-bench/openhands-sdk-<version>``, outside the source tree, built from
the 3.12 of ``pyenv root``, ``openhands-sdk`` pinned; or the interpreter named by
``CTXPOLICY_OPENHANDS_PYTHON``), driven by
:mod:`benchmarks.peers.openhands_worker` over a pipe:

1. before each model call the trace's new messages go to the worker, which turns
   them into OpenHands events (system prompt, messages, one action per tool call,
   one observation per result) and runs the real condenser the way the agent does
   before each LLM call (``condense(view, agent_llm)``; a ``Condensation`` is
   appended to the event log and the view rebuilt);
2. the view the model would get comes back as trace indices plus the summary, which
   becomes a user message (``CondensationSummaryEvent``'s own role), and is measured
   by the replay loop of ``ctxpolicy.sim.replay`` like every other contestant;
3. the condenser's summary LLM is a real litellm call to a loopback OpenAI-compatible
   endpoint (:class:`DigestServer`, the project's scripted server) answering with the
   shared deterministic summary (:func:`benchmarks.peers.summary.digest` of the events
   OpenHands renders into its summary prompt), billed by the ruler like every summary
   (prompt in, digest out).

Configuration: ``max_tokens`` = the compared policy's trigger at the window (OpenHands
then forgets down to half of it: its own hysteresis), the agent LLM's input limit =
window − reserve_output, and OpenHands' defaults for the rest (``max_size`` 80 events,
``keep_first`` 4: ``default_condenser``). OpenHands counts tokens with litellm's
tokenizer (cl100k for the ``gpt-4`` agent model).
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.peers.summary import SUMMARY_TOKENS, digest
from benchmarks.peers.worker import PipeWorker
from ctxpolicy.budget import compute_budget
from ctxpolicy.conversation import content_text
from ctxpolicy.policy.models import Policy
from ctxpolicy.sim.baselines import BaselineStrategy
from ctxpolicy.sim.metrics import SummaryMeter
from ctxpolicy.testing.server import ScriptedLLMServer

__all__ = [
    "LABEL",
    "OPENHANDS_SDK",
    "DigestServer",
    "OpenHandsStrategy",
    "available",
    "ensure_venv",
]

Message = dict[str, Any]
LABEL = "OpenHands LLMSummarizingCondenser"
#: the pinned library (Python ≥ 3.12)
OPENHANDS_SDK = "openhands-sdk==1.58.2"
ROOT = Path(__file__).resolve().parents[2]
#: outside the source tree: nothing that walks benchmarks/ meets a 3.12-only library
VENV = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    / "ctxpolicy-bench"
    / OPENHANDS_SDK.replace("==", "-")
)
WORKER = Path(__file__).resolve().parent / "openhands_worker.py"


def _python() -> Path:
    override = os.environ.get("CTXPOLICY_OPENHANDS_PYTHON")
    return Path(override) if override else VENV / "bin" / "python"


def available() -> bool:
    """Whether the OpenHands virtualenv is there (``ensure_venv`` builds it)."""
    py = _python()
    if not py.exists():
        return False
    res = subprocess.run(
        [str(py), "-c", "import openhands.sdk.context.condenser"],
        capture_output=True,
        timeout=600,
    )
    return res.returncode == 0


def _python312() -> str:
    """A Python 3.12 interpreter: ``pyenv root``'s, else ``python3.12`` on the path."""
    try:
        root = subprocess.run(
            ["pyenv", "root"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        root = str(Path.home() / ".pyenv")
    found = sorted(glob.glob(f"{root}/versions/3.12*/bin/python3.12"))
    if found:
        return found[-1]
    return "python3.12"


def ensure_venv() -> Path:
    """The interpreter of the OpenHands virtualenv, built if missing (the 3.12 of
    ``pyenv root``; ``openhands-sdk`` installed with the project's uv when it has one,
    else pip)."""
    py = _python()
    if available():
        return py
    if os.environ.get("CTXPOLICY_OPENHANDS_PYTHON"):
        raise RuntimeError(f"{py} cannot import openhands.sdk ({OPENHANDS_SDK})")
    subprocess.run([_python312(), "-m", "venv", str(VENV)], check=True)
    uv = ROOT / ".uv" / "bin" / "uv"
    if uv.exists():
        cmd = [str(uv), "pip", "install", "--python", str(py), OPENHANDS_SDK]
    else:
        cmd = [str(py), "-m", "pip", "install", "--quiet", OPENHANDS_SDK]
    subprocess.run(cmd, check=True)
    return py


# --------------------------------------------------------------------------- summary LLM


class DigestServer(ScriptedLLMServer):
    """The project's scripted OpenAI-compatible server, answering every chat call with the
    shared digest of the prompt's last user message (OpenHands puts the forgotten events
    there, the instructions in the system message). Every call is billed to ``meter``
    (the whole prompt in, the digest out)."""

    def __init__(self, count: Callable[[str], int], meter: SummaryMeter | None = None) -> None:
        super().__init__(window=1_000_000_000, script=self.answer, model="digest")
        self.count = count
        self.meter = meter
        self.calls = 0
        self.start()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        user = [content_text(m.get("content")) for m in msgs if m.get("role") == "user"]
        prompt = "\n".join(content_text(m.get("content")) for m in msgs)
        text = digest(user[-1] if user else "", SUMMARY_TOKENS, self.count)
        self.calls += 1
        if self.meter is not None:
            self.meter.record(prompt, text)
        return {"content": text, "prompt_tokens": self.count(prompt)}

    def close(self) -> None:
        self.stop()


# --------------------------------------------------------------------------- the worker


class _Worker(PipeWorker):
    """The OpenHands worker process (one per strategy run, reset per trace)."""

    def __init__(self) -> None:
        py = ensure_venv()
        super().__init__([str(py), str(WORKER)], name="the OpenHands worker", cwd=ROOT)


_SHARED: dict[str, _Worker] = {}


def _worker() -> _Worker:
    """One worker per process (its start imports litellm: tens of seconds)."""
    w = _SHARED.get("w")
    if w is None or w.proc.poll() is not None:
        w = _SHARED["w"] = _Worker()
    return w


class OpenHandsStrategy(BaselineStrategy):
    """The replay strategy: the view OpenHands' condenser leaves, as trace messages."""

    kind = "peer"

    def __init__(
        self, policy: Policy, *, count: Callable[[str], int] | None = None, label: str = LABEL
    ) -> None:
        super().__init__("openhands", policy)
        self.label = label
        count = count or self.counter.count_text  # the policy's counter by default
        self.meter = SummaryMeter(count)
        self.server = DigestServer(count, self.meter)
        b = compute_budget(policy)
        self.worker = _worker()
        self.worker.ask(
            cmd="reset",
            max_tokens=b.trigger,
            max_input_tokens=b.window - b.reserve_output,
            max_size=80,
            keep_first=4,
            base_url=self.server.base_url,
        )
        self._seen = 0
        self.summaries: list[str] = []

    def summarizer_tokens(self) -> tuple[int, int, int]:
        return self.meter.totals()

    def prepare(self, convo: list[Message]) -> tuple[list[Message], list[str]]:
        new = convo[self._seen :]
        self._seen = len(convo)
        ans = self.worker.ask(cmd="step", messages=new)
        out: list[Message] = []
        for item in ans["view"]:
            if "i" in item:
                out.append(convo[item["i"]])
            else:
                out.append({"role": "user", "content": item["summary"] or ""})
        layers: list[str] = []
        if ans["condensed"]:
            self.summaries += [it["summary"] for it in ans["view"] if "summary" in it]
            layers = self._compacted(list(convo), out)
        return out, layers

    def close(self) -> None:
        self.server.close()


if __name__ == "__main__":  # build the virtualenv: python -m benchmarks.peers.openhands
    print(ensure_venv(), file=sys.stderr)
