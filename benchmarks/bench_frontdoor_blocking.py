"""A front end that blocks: does one long history stall another conversation's call?

Three async front ends (the LiteLLM proxy hook, the async OpenAI adapter over loopback
HTTP, the gateway ``ctxpolicy serve``) time a small call of one conversation alone, then
while another conversation prepares an ``--messages``-message history; with the engine
on the event loop, in worker threads (before) and in ``--processes`` engine processes
(after), round by round and interleaved. The section says what each number is.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch at import

from benchmarks._common import (
    eprint,
    free_port,
    http_server,
    machine,
    markdown_table,
    parser,
    publish,
    scripted_upstream,
)

ROOT = Path(__file__).resolve().parents[1]
Msg = dict[str, Any]
#: A front end under test: its small call, its long call, and how to close it.
Case = tuple[Callable[[], Awaitable[Any]], Callable[[], Awaitable[Any]], Callable[[], Any]]


def long_history(n: int) -> list[dict[str, Any]]:
    """``n`` messages of a coding agent's loop: tool calls and short results."""
    out: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix BUG-1234 in src/app.py."},
    ]
    i = 0
    while len(out) < n:
        fn = {"name": "read_file", "arguments": f'{{"path": "src/m{i}.py"}}'}
        call = {"id": f"c{i}", "type": "function", "function": fn}
        out.append({"role": "assistant", "content": f"Reading module {i}.", "tool_calls": [call]})
        body = "\n".join(f"src/m{i}.py:{k}: value_{i}_{k} = compute({k})" for k in range(6))
        out.append({"role": "tool", "tool_call_id": f"c{i}", "content": body})
        i += 1
    return out[:n]


SMALL = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2 + 2?"},
]


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    t = time.perf_counter()
    await call()
    return time.perf_counter() - t


async def _probe(small: Callable[[], Awaitable[Any]], first: float, until: Any) -> list[float]:
    """Small calls, each due at a time, timed from when it was due to when it is
    answered (a call that arrives while the loop is blocked waits for it)."""
    out: list[float] = []
    due = first
    while True:
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        await small()
        out.append(time.perf_counter() - due)
        if until():
            return out
        due = time.perf_counter() + 0.01


async def measure(
    small: Callable[[], Awaitable[Any]], heavy: Callable[[], Awaitable[Any]], alone: int
) -> dict[str, Any]:
    """Small-call latency alone, then while ``heavy()`` runs (a new conversation, so a
    first prepare of the whole history)."""
    for _ in range(3):
        await small()  # warm: the session is open, caches filled
    count = iter(range(alone))
    unloaded = await _probe(small, time.perf_counter(), lambda: next(count, None) is None)
    started = time.perf_counter()
    task = asyncio.ensure_future(heavy())
    loaded = await _probe(small, started + 0.05, task.done)
    await task
    heavy_s = time.perf_counter() - started
    base, during = statistics.median(unloaded), statistics.median(loaded)
    return {
        "unloaded_ms": round(base * 1000, 3),
        "loaded_ms": round(during * 1000, 3),
        "loaded_max_ms": round(max(loaded) * 1000, 3),
        "small_calls_during": len(loaded),
        "heavy_s": round(heavy_s, 3),
        "ratio": round(during / base, 2),
    }


def hook_case(
    policy: Any, history: list[Msg], *, on_loop: bool, tag: str = "", processes: int = 0
) -> Case:
    from litellm.proxy._types import UserAPIKeyAuth

    from ctxpolicy.integrations import litellm as ctx_litellm

    hook = ctx_litellm.ContextPolicyHook(policy, engine_processes=processes)
    key = UserAPIKeyAuth(api_key="sk-bench")
    if hook.sessions.processes is not None:
        hook.sessions.processes.start(wait=True)

    async def pre(messages: list[dict[str, Any]], conv: str) -> Any:
        data = {"model": "m", "messages": list(messages), "litellm_session_id": conv}
        if on_loop:  # the engine on the event loop, as the hook did before
            data["messages"] = hook._prepare(data, key, data["messages"])
            return data
        return await hook.async_pre_call_hook(key, None, data, "completion")

    async def small() -> Any:
        return await pre(SMALL, "small")

    async def heavy() -> Any:
        return await pre(history, f"heavy-{on_loop}-{tag}0")

    return small, heavy, hook.sessions.close


def adapter_case(policy: Any, history: list[Msg], base_url: str, tag: str, processes: int) -> Case:
    """The async OpenAI adapter; with ``processes``, its sessions come from a pool whose
    engine runs in that many processes (``SessionPool(..., engine_processes=N)``)."""
    import openai

    from ctxpolicy.calls.pool import SessionPool
    from ctxpolicy.integrations.openai import wrap

    pool = SessionPool(policy, engine_processes=processes)
    if pool.processes is not None:
        pool.processes.start(wait=True)
    client = openai.AsyncOpenAI(base_url=base_url, api_key="k", max_retries=0)
    small_client = wrap(client, pool.get("small"))

    async def small() -> Any:
        return await small_client.chat.completions.create(model="m", messages=SMALL)

    heavy_client = wrap(client, pool.get(f"heavy-{tag}0"))

    async def heavy() -> Any:
        return await heavy_client.chat.completions.create(model="m", messages=history)

    return small, heavy, pool.close


def gateway(base_url: str, processes: int) -> Any:
    """``ctxpolicy serve`` (one worker, ``--engine-processes``) in a process of its own in
    front of the scripted server; its URL once ``/healthz`` answers (the gateway serves
    once its engine processes are up)."""
    port = free_port()
    cmd = [
        *(sys.executable, "-m", "ctxpolicy.cli", "serve"),
        *("--policy", str(ROOT / "policies" / "agents.yaml"), "--agent", "coding_agent"),
        *("--upstream", base_url, "--port", str(port), "--log-level", "warning"),
        *("--engine-processes", str(processes)),
    ]
    return http_server(cmd, port, cwd=ROOT)


def gateway_case(url: str, history: list[dict[str, Any]], tag: str) -> Case:
    """A small chat call of one conversation through the gateway while another
    conversation's long history goes through it (real HTTP on loopback)."""
    import httpx

    client = httpx.AsyncClient(timeout=600)

    async def post(messages: list[dict[str, Any]], conv: str) -> Any:
        r = await client.post(
            url + "/v1/chat/completions",
            json={"model": "m", "messages": messages},
            headers={"Authorization": "Bearer k", "X-Ctxpolicy-Conversation": conv},
        )
        r.raise_for_status()
        return r

    async def small() -> Any:
        return await post(SMALL, "small-" + tag)

    async def heavy() -> Any:
        return await post(history, f"heavy-{tag}0")

    return small, heavy, client.aclose


_FLOOR = """
import json, sys
from ctxpolicy import Session, load_policy
from ctxpolicy.state.memory import MemoryStateStore
policy = load_policy(sys.argv[1], agent="coding_agent")
history = json.loads(sys.stdin.readline())
print("ready", flush=True)
for line in sys.stdin:
    Session(policy, state_store=MemoryStateStore()).prepare(history)
    print("done", flush=True)
"""


@contextlib.contextmanager
def floor(history: list[dict[str, Any]]) -> Iterator[Callable[[], Awaitable[Any]]]:
    """A ``heavy`` that prepares ``history`` in a process of its own, unrelated to the
    front end (started and loaded beforehand): the front end then shares only the
    machine with it, which is the least any engine placement can do."""
    import json

    proc = subprocess.Popen(
        [sys.executable, "-c", _FLOOR, str(ROOT / "policies" / "agents.yaml")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(history) + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ready"

    def go() -> str:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        return proc.stdout.readline()

    async def heavy() -> Any:
        return await asyncio.to_thread(go)

    try:
        yield heavy
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


#: The engine lanes compared in one run: worker threads of the front end's process
#: (before, the default) and engine processes (after; ``None``: ``--processes``).
LANES = (("engine in threads (before)", 0), ("engine in {n} processes (after)", None))
FRONTS = {
    "hook": "litellm hook",
    "adapter": "async OpenAI adapter",
    "gateway": "gateway (ctxpolicy serve)",
}


def salted(history: list[dict[str, Any]], salt: str) -> list[dict[str, Any]]:
    """The same history with every non-system message made unique to one measurement
    (no token count or snapshot of another measurement is reused)."""
    return [
        m if m["role"] == "system" else {**m, "content": f"{m.get('content') or ''} [{salt}]"}
        for m in history
    ]


def run_case(
    small: Callable[[], Awaitable[Any]],
    heavy: Callable[[], Awaitable[Any]],
    close: Callable[[], Any],
    alone: int,
) -> dict[str, Any]:
    """:func:`measure` on an event loop of its own, then the front end closed."""

    async def go() -> dict[str, Any]:
        try:
            return await measure(small, heavy, alone)
        finally:
            if inspect.isawaitable(done := close()):
                await done

    return asyncio.run(go())


def combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the rounds of one variant: medians, the worst max, the calls."""
    return {
        "unloaded_ms": round(statistics.median(r["unloaded_ms"] for r in runs), 3),
        "loaded_ms": round(statistics.median(r["loaded_ms"] for r in runs), 3),
        "loaded_max_ms": max(r["loaded_max_ms"] for r in runs),
        "small_calls_during": sum(r["small_calls_during"] for r in runs),
        "heavy_s": round(statistics.median(r["heavy_s"] for r in runs), 3),
        "ratio": round(statistics.median(r["ratio"] for r in runs), 2),
        "ratios": [r["ratio"] for r in runs],
    }


def notes(results: dict[str, Any], processes: int) -> str:
    """The reading of the rows, from this run's numbers."""

    def find(front: str, lane: str) -> dict[str, Any] | None:
        return next((r for k, r in results.items() if k.startswith(front) and lane in k), None)

    out = ["What the rows say."]
    on_loop = find("litellm hook", "on the loop")
    if on_loop:
        out.append(
            f"With the engine on the event loop (first row) the small call waits for the whole "
            f"prepare ({on_loop['loaded_ms'] / 1000:.1f} s)."
        )
    hook_t, hook_p = find("litellm hook", "threads"), find("litellm hook", "processes")
    if hook_t and hook_p:
        out.append(
            "With the engine in worker threads of the front end's process the small call is "
            "answered during the prepare, but it waits for the interpreter lock the prepare "
            "holds at each hand-off between the event loop and its thread: the hook's call "
            f"takes {hook_t['ratio']}× its time alone ({hook_t['pooled_ratio']}× its "
            "median time alone over the run). With "
            f"{processes} engine "
            "processes the long conversation moves to one at its first heavy step (200 "
            "messages or 400,000 characters) while the small one stays in the front end's "
            f"threads: {hook_p['ratio']}× ({hook_p['pooled_ratio']}×; goal: at most 1.2×)."
        )
        hook_f = find("litellm hook", "floor")
        if hook_f:
            out.append(
                "The floor row is the same small call while an unrelated process prepares "
                "the history (the front end then shares only the machine with it, the least "
                f"any placement of the engine can do): {hook_f['ratio']}× "
                f"({hook_f['pooled_ratio']}×), "
                f"{hook_f['loaded_ms']:.2f} ms loaded against {hook_p['loaded_ms']:.2f} ms "
                "with engine processes."
            )
    lanes = [
        (front, find(front, "threads"), find(front, "processes"))
        for front in ("async OpenAI adapter", "gateway")
    ]
    http = [(f, t, p) for f, t, p in lanes if t and p]
    if http:
        alone = [r["unloaded_ms"] for _, t, p in http for r in (t, p)]
        moves = "; ".join(
            f"{f}: {t['loaded_ms']:.1f} → {p['loaded_ms']:.1f} ms loaded" for f, t, p in http
        )
        out.append(
            "The async adapter's and the gateway's small calls are HTTP exchanges with "
            "another process (the scripted provider; the gateway is one too): alone they "
            f"took {min(alone):.1f}–{max(alone):.1f} ms (medians) from one lane to the other, "
            "on a 2-CPU machine shared with other jobs, and a call under load can be faster "
            "than the same call alone (a ratio below 1). Their ratios are as noisy as that "
            f"denominator; compare their loaded times between the lanes ({moves})."
        )
        slower = [
            (f, t, p)
            for f, t, p in http
            if p["heavy_s"] > t["heavy_s"] and p["small_calls_during"] > t["small_calls_during"]
        ]
        if slower:
            f, t, p = slower[0]
            out.append(
                f"The long prepare took longer with engine processes ({f}: {t['heavy_s']} → "
                f"{p['heavy_s']} s): the other conversation, no longer waiting for the lock, "
                f"made more calls during it ({t['small_calls_during']} → "
                f"{p['small_calls_during']}), and they share the two CPUs with it."
            )
    out.append(
        "The maxima are single calls out of hundreds and move from run to run: at this "
        "load, an event loop asleep for 1 ms can wake tens of milliseconds late (a separate "
        "probe of the adapter with engine processes, sampling the loop's thread during its "
        "stalls over 10 ms, found it waiting in `select`, not running ctxpolicy code)."
    )
    return wrap_text(" ".join(out))


def wrap_text(text: str, width: int = 88) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "a smoke run: 300 messages, one round, one engine process")
    ap.add_argument("--messages", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", type=int, help="engine processes (after; default 2)")
    args = ap.parse_args(argv)
    n, rounds = (300, 1) if args.quick else (args.messages, args.rounds)
    args.processes = args.processes or (1 if args.quick else 2)
    alone = 5 if args.quick else 30  # small calls timed with no long history in flight
    home = tempfile.mkdtemp(prefix="ctxpolicy-bench-")
    os.environ["CTXPOLICY_HOME"] = home
    from ctxpolicy import load_policy

    policy = load_policy(ROOT / "policies" / "agents.yaml", agent="coding_agent")
    history = long_history(n)
    results: dict[str, Any] = {}
    loads: list[list[float]] = [[round(x, 2) for x in os.getloadavg()]]

    eprint(f"{n} messages, {rounds} round(s)")
    name = "litellm hook, engine on the loop (before)"
    results[name] = run_case(*hook_case(policy, salted(history, "on-loop"), on_loop=True), alone)
    eprint(name, results[name])
    runs: dict[str, list[dict[str, Any]]] = {}

    def one(front: str, label: str, n_procs: int, tag: str, base_url: str) -> None:
        hist = salted(history, {"gateway": "gw"}.get(front, front) + tag)
        if front == "gateway":
            with gateway(base_url, n_procs) as (url, _):
                result = run_case(*gateway_case(url, hist, tag), alone)
        elif front == "hook":
            case = hook_case(policy, hist, on_loop=False, tag=tag, processes=n_procs)
            result = run_case(*case, alone)
        else:
            result = run_case(*adapter_case(policy, hist, base_url, tag, n_procs), alone)
        name = f"{FRONTS[front]}, {label}"
        runs.setdefault(name, []).append(result)
        eprint(name, result)

    with scripted_upstream("4") as (url, _):
        base_url = url + "/v1"
        for r in range(rounds):  # before and after interleaved, round by round
            for label, n_procs in LANES:
                n_procs = args.processes if n_procs is None else n_procs
                label = label.format(n=args.processes)
                for front in FRONTS:
                    one(front, label, n_procs, f"{label[:12]}-{r}-", base_url)
            # the floor: the machine alone
            small, _, close = hook_case(policy, SMALL, on_loop=False, tag=f"floor-{r}-")
            with floor(salted(history, f"floor-{r}")) as heavy:
                result = run_case(small, heavy, close, alone)
            name = "litellm hook, the long history prepared by an unrelated process (floor)"
            runs.setdefault(name, []).append(result)
            eprint(name, result)
            loads.append([round(x, 2) for x in os.getloadavg()])
    for key in runs:
        results[key] = combined(runs[key])
        # one front end's small call alone does not depend on the lane much: the
        # median of all its unloaded samples is a steadier denominator
        kind = key.split(",")[0]
        pooled = statistics.median(
            r["unloaded_ms"] for k, rs in runs.items() if k.startswith(kind) for r in rs
        )
        results[key]["pooled_unloaded_ms"] = round(pooled, 3)
        results[key]["pooled_ratio"] = round(results[key]["loaded_ms"] / pooled, 2)

    data = {"machine": machine(["litellm", "openai", "anyio"]), "messages": n, "rounds": rounds}
    data |= {"loads": loads, "results": results, "processes": args.processes}
    publish("bench_frontdoor_blocking", data, to_markdown(data))
    return 0


COLUMNS = ["unloaded_ms", "loaded_ms", "loaded_max_ms", "small_calls_during", "heavy_s", "ratio"]


def to_markdown(data: dict[str, Any]) -> str:
    results, processes = data["results"], data.get("processes", 2)
    rows = [
        [k, *(r[c] for c in COLUMNS), r.get("pooled_ratio", r["ratio"])] for k, r in results.items()
    ]
    return "\n\n".join(
        [
            "## Front door: does one long history block another conversation?",
            f"A small call of one conversation while another prepares {data['messages']:,} "
            f"messages (each round a new conversation and a history of its own; median of "
            f"{data['rounds']} round(s), before and after interleaved round by round); ratio = "
            "loaded ÷ unloaded of the same measurement (median over its rounds); the last column "
            "divides by the median unloaded time of that front end over every measurement "
            "of the run (the machine's load moves a sub-millisecond call alone by several "
            f"times). Load averages (1, 5, 15 min) at the start and after each round: "
            f"{data['loads']}.",
            markdown_table(
                "front end | unloaded ms | loaded ms | loaded max ms | small calls during | "
                "heavy prepare s | ratio | ratio to all its unloaded",
                rows,
            ),
            notes(results, processes),
            "Reproduce: `.venv/bin/python benchmarks/bench_frontdoor_blocking.py` "
            f"(`--processes {processes}`; `--quick`: a smoke run of 300 messages, one round).",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
