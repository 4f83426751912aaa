"""Three incidents, replayed with a fixed-threshold policy and with ours.

Deterministic agent loops on a 32,000-token window: a scripted provider rejects a
request when ``prompt + 4000 > 32000`` and the fake summarizer an oversized summary
request. The scenarios are also tests (tests/test_incidents.py asserts the behaviour).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.append(str(Path(__file__).resolve().parents[1]))  # run as a file

from benchmarks._common import machine, markdown_table, parser, publish
from ctxpolicy.state.memory import MemoryStateStore  # each run starts fresh
from ctxpolicy.testing.conversations import tool_call

WINDOW = 32000
OUTPUT = 4000  # max_tokens the agent requests on every call (design B's output reserve)
Message = dict[str, Any]

MODEL = f"{{context_window: {WINDOW}, max_output_tokens: {OUTPUT}, tokenizer: cl100k_base}}"

#: Design B's dynamic policy: 32000 − 4000 − 6000 − 2000 = 20000, recovery target 14000.
DYNAMIC = f"""
ctxpolicy: 1
policies:
  default:
    model: {MODEL}
    budget:
      reserve_output: {OUTPUT}
      tool_growth: {{learn: {{quantile: 0.9, window: 20}}, initial: 6000, max: "25%"}}
      safety_margin: 2000
      target: 14000
    thresholds: {{warning: 0.70, error: 0.90, critical: 0.95}}
    pipeline:
      - {{layer: observation_mask, at: error, options: {{max_age_rounds: 3, max_chars: 200}}}}
      - {{layer: summarize, at: error, options: {{summarizer: extractive, keep_recent_rounds: 3}}}}
      - {{layer: drop_rounds, at: error, options: {{keep_recent_rounds: 3, min_keep_tokens: 2000}}}}
    on_overflow: {{layer: emergency, options: {{keep_recent_rounds: 2, retries: 1}}}}
    tools:
      search_logs: {{preprocess: log_levels, options: {{levels: [ERROR, WARN], last: 50}}}}
      read_file: {{preprocess: head_tail_lines, options: {{lines: 50, min_lines: 200}}}}
      "*": {{preprocess: head_tail, options: {{max_chars: 3000}}}}
    snapshots: {{path: "{{snapshots}}"}}
"""

#: The dynamic policy with the summary first (scenario b is about the summary call).
DYNAMIC_SUMMARY = DYNAMIC.replace(
    """      - {layer: observation_mask, at: error, options: {max_age_rounds: 3, max_chars: 200}}
      - {layer: summarize, at: error, options: {summarizer: extractive, keep_recent_rounds: 3}}""",
    """      - {layer: summarize, at: error, options: {summarizer: extractive, keep_recent_rounds: 3}}""",
)
assert DYNAMIC_SUMMARY != DYNAMIC

#: A fixed trigger at ``fraction`` of the window: nothing reserved, results unprocessed.
#: ``target`` just below the trigger unless given (no recovery band).
FIXED = """
ctxpolicy: 1
policies:
  default:
    model: {model}
    budget: {{reserve_output: 0, tool_growth: 0, safety_margin: 0, target: {target}}}
    thresholds: {{warning: {fraction}, error: {error}, critical: {critical}}}
    pipeline:
{pipeline}
    on_overflow: {{layer: emergency, options: {{keep_recent_rounds: 2, retries: 1}}}}
    tools:
      "*": {{preprocess: head_tail, options: {{max_chars: 100000000}}}}
    snapshots: {{path: "{{snapshots}}"}}
"""


def fixed_policy(fraction: float, pipeline: str, *, target: float | None = None) -> str:
    return FIXED.format(
        model=MODEL,
        fraction=fraction,
        error=min(1.0, round(fraction + 0.001, 3)),
        critical=min(1.0, round(fraction + 0.002, 3)),
        target=target if target is not None else round(fraction - 0.01, 3),
        pipeline=pipeline,
    )


def load(text: str, tmp: Path, name: str) -> Any:
    import ctxpolicy

    p = tmp / f"{name}.yaml"
    p.write_text(text.replace("{snapshots}", str(tmp / "snapshots" / name)), encoding="utf-8")
    return ctxpolicy.load_policy(str(p), agent="default")


# --------------------------------------------------------------------------- content


def _count(text: str) -> int:
    from ctxpolicy.tokens import TiktokenTokenizer

    return TiktokenTokenizer.load("cl100k_base", None).count(text)


def _lines_of(tokens: int, line: Any) -> str:
    """``line(i)`` for i = 0, 1, … until about ``tokens`` cl100k tokens."""
    out: list[str] = []
    n = i = 0
    while n < tokens:
        out.append(line(i))
        n += _count(out[-1]) + 1
        i += 1
    return "\n".join(out)


def filler(tag: str, tokens: int) -> str:
    """Deterministic code-like tool output of about ``tokens`` cl100k tokens."""
    return _lines_of(
        tokens,
        lambda i: f"{tag}.py:{i:04d}: result_{i % 97} = compute(batch={i}, retries={i % 5})  # ok",
    )


LEVELS = ["INFO", "DEBUG", "INFO", "WARN", "INFO", "ERROR", "DEBUG", "INFO"]


def big_log(tokens: int) -> str:
    """A service log of about ``tokens`` tokens, mostly prose (≈ 4–5 characters/token)."""
    return _lines_of(
        tokens,
        lambda i: (
            f"{LEVELS[i % 8]} worker {i % 7} handled the request for customer account number "
            f"{1000 + i} and waited for a database connection from the shared pool"
            + (" until the timeout expired" if i % 8 == 5 else " without any problem")
        ),
    )


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    return tool_call(f"call_{i:03d}", name, args, sort_keys=False)


class Provider:
    """A model endpoint with a window: rejects ``prompt + max_tokens > window``."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.calls = 0
        self.rejected = 0
        self.max_prompt = 0

    def check(self, prepared: list[Message]) -> tuple[bool, int]:
        n = self.counter.count_messages(prepared)
        self.calls += 1
        self.max_prompt = max(self.max_prompt, n)
        if n + OUTPUT > WINDOW:
            self.rejected += 1
            return False, n
        return True, n


class WindowedSummarizer:
    """The summary LLM call on the same window: fails when the request does not fit,
    otherwise returns ctxpolicy's extractive digest. Records every request size."""

    def __init__(self, count_text: Any) -> None:
        from ctxpolicy.summarizers.extractive import ExtractiveSummarizer

        self.inner = ExtractiveSummarizer()
        self.count_text = count_text
        self.requests: list[dict[str, int | bool]] = []

    def _message_tokens(self, m: Mapping[str, Any]) -> int:
        n = 4 + self.count_text(str(m.get("content") or ""))
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            n += sum(self.count_text(str(fn.get(k, ""))) for k in ("name", "arguments"))
        return n

    def __call__(self, request: Any) -> str:
        ct = self.count_text
        texts = [request.instructions, request.previous_summary or "", *request.constraints]
        size = sum(self._message_tokens(m) for m in request.messages) + sum(map(ct, texts))
        fits = size + request.max_tokens <= WINDOW
        self.requests.append({"input": size, "max_tokens": request.max_tokens, "fits": fits})
        if not fits:
            raise RuntimeError(
                f"context_length_exceeded: maximum context length is {WINDOW} tokens, "
                f"requested {size + request.max_tokens}"
            )
        return str(self.inner.summarize(request))


def run_loop(
    policy: Any,
    rounds: list[tuple[dict[str, Any], str]],
    *,
    task: str,
    summarizer: WindowedSummarizer | None = None,
) -> dict[str, Any]:
    """The agent loop: prepare → provider → assistant step → tool result, per round,
    then one final call. On a rejection the agent calls ``on_error`` once and retries."""
    import ctxpolicy

    kwargs: dict[str, Any] = {"summarizer": summarizer} if summarizer is not None else {}
    session = ctxpolicy.Session(
        policy, conv_id="incident", **kwargs, state_store=MemoryStateStore()
    )
    if summarizer is not None:
        summarizer.count_text = session.counter.count_text
    provider = Provider(session.counter)
    convo: list[Message] = [
        {"role": "system", "content": "You are a careful engineering agent."},
        {"role": "user", "content": task},
    ]
    series: list[dict[str, Any]] = []
    failed_after_retry = 0
    last_prepared: list[Message] = []

    def model_call() -> None:
        nonlocal failed_after_retry, last_prepared
        before = sum(session.stats.compactions.values())
        prepared = session.prepare(convo)
        ok, n = provider.check(prepared)
        if not ok:
            retry = None
            err = (
                f"This model's maximum context length is {WINDOW} tokens. (context_length_exceeded)"
            )
            with contextlib.suppress(ctxpolicy.ContextOverflowError):
                retry = session.on_error(err, convo)
            if retry is not None:
                prepared = retry
                fits, n = provider.check(prepared)
                provider.calls -= 1  # the retry is the same logical call
            failed_after_retry += retry is None or not fits
        comp = sum(session.stats.compactions.values()) - before
        series.append({"prompt": n, "ok": ok, "retried": not ok, "compactions": comp})
        last_prepared = prepared

    for i, (tc, output) in enumerate(rounds):
        model_call()
        convo.append({"role": "assistant", "content": f"Step {i + 1}.", "tool_calls": [tc]})
        text = session.add_tool_result(tc, output)
        convo.append({"role": "tool", "tool_call_id": tc["id"], "content": text})
    model_call()
    st = session.stats
    calls_with_comp = sum(1 for s in series if s["compactions"])
    gaps = [i for i, s in enumerate(series) if s["compactions"]]
    spacing = [b - a for a, b in itertools.pairwise(gaps)]
    context = "\n".join(str(m.get("content") or "") for m in last_prepared)
    status = [e for e in session.events if e.get("type") == "context.status"]
    return {
        "calls": len(series),
        "rejected_first_attempt": provider.rejected
        - sum(1 for s in series if s["retried"] and s["ok"]),
        "rejected_calls": sum(1 for s in series if not s["ok"]),
        "failed_after_retry": failed_after_retry,
        "max_prompt": provider.max_prompt,
        "max_prompt_plus_output": provider.max_prompt + OUTPUT,
        "compactions": dict(st.compactions),
        "compactions_total": sum(st.compactions.values()),
        "calls_with_compaction": calls_with_comp,
        "mean_calls_between_compactions": (sum(spacing) / len(spacing)) if spacing else None,
        "layer_failures": dict(st.layer_failures),
        "overflow_events": st.overflows,
        "squeezed": sum(1 for e in status if e.get("compact_layer") == "squeeze"),
        "breaker_open": sum(1 for e in session.events if e.get("type") == "breaker.open"),
        "trigger": session.budget().trigger,
        "target": session.budget().target,
        "series": series,
        "final_context": context,
        "final_tokens": series[-1]["prompt"],
        "summary_requests": list(summarizer.requests) if summarizer else [],
    }


# --------------------------------------------------------------------------- scenarios


def scenario_a(tmp: Path, quick: bool = False) -> dict[str, Any]:
    """75 % full, then one search_logs call returns ~25k tokens."""
    small = 4 if quick else 8
    rounds: list[tuple[dict[str, Any], str]] = []
    # small results that fill the context to ~75 % (24,000 tokens) before the big one
    per = 24000 // small - 60
    for i in range(small):
        rounds.append((call(i, "read_file", path=f"src/mod_{i}.py"), filler(f"mod_{i}", per)))
    rounds.append((call(99, "search_logs", query="timeout"), big_log(25000)))
    out: dict[str, Any] = {
        "scenario": "a",
        "title": "fixed 80 % trigger + one 25k-token tool result",
    }
    pipeline = "      - {layer: drop_rounds, at: warning, options: {keep_recent_rounds: 2, min_keep_tokens: 100}}"
    for name, text in [("fixed_80", fixed_policy(0.8, pipeline)), ("dynamic", DYNAMIC)]:
        pol = load(text, tmp, f"a_{name}")
        out[name] = run_loop(pol, rounds, task="Find why requests time out.")
    out["big_result_tokens"] = _count(rounds[-1][1])
    out["tokens_before_big_result"] = out["fixed_80"]["series"][-2]["prompt"]
    return out


def scenario_b(tmp: Path, quick: bool = False) -> dict[str, Any]:
    """The context grows to 95 % of the window; the summary call must still fit."""
    # 7 results of 3,700 tokens (~26k, ~81 %), then one of 5,000 lands the context at
    # ~96 %, then a few more: the fixed policy's summary is asked for at 95 %.
    sizes = [3700] * 7 + [5000] + [2500] * (2 if quick else 6)
    rounds = [
        (call(i, "read_file", path=f"pkg/part_{i}.py"), filler(f"part_{i}", n))
        for i, n in enumerate(sizes)
    ]
    pipeline = (
        "      - {layer: summarize, at: critical, options: {summarizer: extractive, "
        "keep_recent_rounds: 0, max_input_tokens: 1000000, min_region_tokens: 0}}"
    )
    out: dict[str, Any] = {
        "scenario": "b",
        "title": "95 % trigger: no room left for the summary call",
    }
    # fixed_95: trigger (warning) at 0.95; its summarize runs at `critical` = 0.952 and
    # folds the whole history in one request (keep_recent_rounds 0, no chunking)
    for name, text in [("fixed_95", fixed_policy(0.95, pipeline)), ("dynamic", DYNAMIC_SUMMARY)]:
        pol = load(text, tmp, f"b_{name}")
        summ = WindowedSummarizer(None)
        out[name] = run_loop(pol, rounds, task="Refactor the pkg module.", summarizer=summ)
        reqs = out[name]["summary_requests"]
        biggest = max((int(r["input"]) + int(r["max_tokens"]) for r in reqs), default=0)
        out[name] |= {"summary_calls": len(reqs), "max_summary_request": biggest}
        out[name]["summary_calls_rejected"] = sum(1 for r in reqs if not r["fits"])
    return out


KEY_FACT = "max_connections=10"


def scenario_c(tmp: Path, quick: bool = False) -> dict[str, Any]:
    """Many ~1,200-token steps; count compactions (thrash) and the key fact's survival."""
    n = 18 if quick else 40
    config = f"[pool]\n{KEY_FACT}\ntimeout_s=30\n" + filler("db_ini", 600)
    rounds = [(call(0, "read_file", path="config/db.ini"), config)]
    for i in range(1, n):
        test = call(i, "run_command", command=f"pytest tests/test_{i}.py")
        rounds.append((test, filler(f"t{i}", 1200)))
    # compaction just below the trigger, no recovery band: drop the oldest round(s) only
    pipeline = "      - {layer: drop_rounds, at: warning, options: {keep_recent_rounds: 2, min_keep_tokens: 100}}"
    out: dict[str, Any] = {"scenario": "c", "title": "50 % trigger: compaction every few steps"}
    for name, text in [("fixed_50", fixed_policy(0.5, pipeline)), ("dynamic", DYNAMIC)]:
        pol = load(text, tmp, f"c_{name}")
        r = run_loop(pol, rounds, task="Fix the flaky tests.")
        r["key_fact_in_final_context"] = KEY_FACT in r["final_context"]
        r["thrash_rate"] = r["calls_with_compaction"] / r["calls"]
        out[name] = r
    return out


def run_all(quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="ctxpolicy-incidents-") as d:
        tmp = Path(d)
        scenarios = {"a": scenario_a, "b": scenario_b, "c": scenario_c}
        return {k: run(tmp, quick) for k, run in scenarios.items()}


# --------------------------------------------------------------------------- report


def _strip(r: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in r.items() if k != "final_context"}


#: each scenario's table: (row label, field of a run's result, or a function of it)
ROWS: dict[str, tuple[tuple[str, Any], ...]] = {
    "a": (
        ("trigger (tokens)", "trigger"),
        ("model calls", "calls"),
        ("calls rejected by the provider", "rejected_calls"),
        ("still failing after on_error retry", "failed_after_retry"),
        ("largest prompt + output", "max_prompt_plus_output"),
        ("compactions", "compactions_total"),
    ),
    "b": (
        ("summary calls", "summary_calls"),
        ("summary calls rejected (request + summary > window)", "summary_calls_rejected"),
        ("largest summary request + output (tokens)", "max_summary_request"),
        ("circuit breaker opened", "breaker_open"),
        ("main calls rejected by the provider", "rejected_calls"),
        ("largest prompt + output", "max_prompt_plus_output"),
        ("compactions", lambda r: str(r["compactions"] or "none")),
    ),
    "c": (
        ("trigger / target (tokens)", lambda r: f"{r['trigger']:,} / {r['target']:,}"),
        ("model calls", "calls"),
        ("calls that compacted", "calls_with_compaction"),
        ("thrash rate (compacting calls ÷ calls)", lambda r: f"{r['thrash_rate']:.0%}"),
        ("mean calls between compactions", lambda r: r["mean_calls_between_compactions"] or "n/a"),
        (f"`{KEY_FACT}` in the final context", "key_fact_in_final_context"),
        ("calls rejected by the provider", "rejected_calls"),
    ),
}


def _table(key: str, fixed: Mapping[str, Any], ours: Mapping[str, Any], head: str) -> str:
    cell = lambda r, f: r[f] if isinstance(f, str) else f(r)  # noqa: E731
    rows = [[label, cell(fixed, f), cell(ours, f)] for label, f in ROWS[key]]
    return markdown_table(head, rows, align="lrr")


def to_markdown(data: dict[str, Any]) -> str:
    a, b, c = (data["scenarios"][k] for k in "abc")
    fa, da = a["fixed_80"], a["dynamic"]
    fb, db = b["fixed_95"], b["dynamic"]
    fc, dc = c["fixed_50"], c["dynamic"]
    ok = {True: "✓", False: "✗"}
    b_ok = fb["summary_calls_rejected"] > 0 and db["summary_calls_rejected"] == 0
    md = [
        "## Incident scenarios (design B)",
        f"Window {WINDOW:,} tokens, {OUTPUT:,} output tokens requested per call; a call is "
        f"rejected when prompt + {OUTPUT:,} > {WINDOW:,}. On a rejection the agent calls "
        "`Session.on_error` once and retries.",
        f"### (a) {a['title']} ({a['big_result_tokens']:,}-token result at ~75 %)",
        _table("a", fa, da, " | fixed 80 % | ours (dynamic)"),
        f"Goal: overflow with the fixed policy, none with ours — "
        f"{ok[fa['rejected_calls'] > 0 and da['rejected_calls'] == 0]}",
        f"### (b) {b['title']}",
        _table("b", fb, db, " | fixed 95 % | ours (dynamic)"),
        f"Goal: the fixed policy's summary call does not fit, ours always does "
        f"(≤ {WINDOW:,}) — {ok[b_ok and db['summary_calls'] > 0]}",
        f"### (c) {c['title']}",
        _table("c", fc, dc, " | fixed 50 % | ours (dynamic + recovery target)"),
        f"Goal: ours compacts at most half as often — "
        f"{ok[dc['calls_with_compaction'] * 2 <= fc['calls_with_compaction']]}",
        "Reproduce: `.venv/bin/python benchmarks/bench_incidents.py"
        + (" --quick`" if data["quick"] else "`")
        + " (tests: `.venv/bin/pytest tests/test_incidents.py`)",
    ]
    return "\n\n".join(md)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__, "shorter conversations (smoke test)")
    args = ap.parse_args(argv)
    data = {"machine": machine(["ctxpolicy", "tiktoken"]), "window": WINDOW}
    data |= {"output_tokens": OUTPUT, "quick": args.quick}
    data["scenarios"] = {
        k: {kk: (_strip(vv) if isinstance(vv, dict) else vv) for kk, vv in v.items()}
        for k, v in run_all(args.quick).items()
    }
    publish("bench_incidents", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
