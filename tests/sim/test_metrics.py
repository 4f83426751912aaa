"""Every metric on a hand-made trace with hand-computed numbers (word counter, scripted strategy)."""

from __future__ import annotations

from typing import Any

from ctxpolicy.conversation.facts import extract
from ctxpolicy.sim.replay import run_strategy

from .conftest import Scripted, WordCounter, call

REF = "ctxsnap://t/step_001_read_file"
MASKED = f"[masked] [Full detail available at: /s/a.json ({REF})]"


def trace() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "fix src/app.py"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("c1", "read_file", path="src/app.py")],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "alpha KEY-9876 beta"},
        {"role": "assistant", "content": "checking", "tool_calls": [call("c2", "bash", cmd="ls")]},
        {"role": "tool", "tool_call_id": "c2", "content": "one LOST-4242"},
        # the same read twice in one message, after c1 was masked: one repeat
        {
            "role": "assistant",
            "content": "KEY-9876 matters",
            "tool_calls": [
                call("c3", "read_file", path="src/app.py"),
                call("c3b", "read_file", path="src/app.py"),
            ],
        },
        {"role": "tool", "tool_call_id": "c3", "content": "alpha KEY-9876 beta"},
        {"role": "tool", "tool_call_id": "c3b", "content": "alpha KEY-9876 beta"},
        # read again while c3b is intact: not a repeat after compaction
        {
            "role": "assistant",
            "content": "LOST-4242 and KEY-9876",
            "tool_calls": [call("c4", "read_file", path="src/app.py")],
        },
        {"role": "tool", "tool_call_id": "c4", "content": "alpha KEY-9876 beta"},
    ]


def script(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = [dict(m) for m in convo]
    if step >= 2:  # mask c1's result, keeping its reference
        out[3] = {**out[3], "content": MASKED}
    if step >= 3:  # drop the c2 round entirely (its fact LOST-4242 has no snapshot)
        del out[4:6]
    return out


def run(hard_limit: int = 20, fn: Any = script) -> dict[str, Any]:
    strat = Scripted(fn, snapshots={REF: "alpha KEY-9876 beta"}, hard_limit=hard_limit)
    return run_strategy(trace(), strat, counter=WordCounter(), trace="hand").to_dict()


def test_facts_the_expectations_rely_on() -> None:
    assert extract('read_file\n{"path": "src/app.py"}').all() == ["src/app.py"]
    assert extract("KEY-9876 matters").all() == ["KEY-9876"]
    assert extract("LOST-4242 and KEY-9876").all() == ["LOST-4242", "KEY-9876"]
    assert extract('checking\nbash\n{"cmd": "ls"}').all() == []


def test_tokens_cost_and_cached_prefix() -> None:
    d = run()
    # used per call: [S, user]=3; +A1+T1=9; T1 masked (7 words) +A2+T2=19; −(A2,T2) +A3+T3+T3b=27
    assert d["series"]["used"] == [3, 9, 19, 27]
    assert d["series"]["none"] == [3, 9, 15, 29]
    assert d["prompt_tokens"] == 58
    assert d["prompt_tokens_none"] == 56
    assert d["saving"] == round((56 - 58) / 56, 4)
    # leading messages equal to the previous call's: 0, [S,user]=3, [S,user,A1]=6, [..,T1 masked]=13
    assert d["series"]["cached"] == [0, 3, 6, 13]
    assert d["cache"]["cached_tokens"] == 22
    assert d["cost"]["output_tokens"] == 3 + 4 + 8 + 6


def test_overflow_and_ratio() -> None:
    d = run(hard_limit=20)
    assert d["overflows"] == 1  # only the 27-token call exceeds 20
    assert d["max_used"] == 27
    assert d["ratio"]["max"] == 0.27  # trigger 100
    assert run(hard_limit=27)["overflows"] == 0  # equal to the limit is not above it


def test_unavoidable_overflow_needs_system_task_and_newest_above_the_limit() -> None:
    # floor per call = [S, user] (3) + the newest message: 3 (it is the task), 6, 5, 6
    d = run(hard_limit=5)
    assert d["overflows"] == 3  # 9, 19, 27 > 5
    assert d["overflows_unavoidable"] == 2  # calls 2 and 4: floor 6 > 5
    assert run(hard_limit=20)["overflows_unavoidable"] == 0
    assert run(hard_limit=2)["overflows_unavoidable"] == 4  # even the task alone is above


def test_repeated_read_after_masking_counted_once() -> None:
    d = run()
    assert d["repeated_reads"] == 1
    assert d["repeated_examples"] == ['step 2: read_file {"path": "src/app.py"}']


def test_repeat_with_changed_output_is_not_a_repeated_read() -> None:
    msgs = trace()
    msgs[7] = {**msgs[7], "content": "alpha KEY-9876 gamma (file edited)"}
    msgs[8] = {**msgs[8], "content": "alpha KEY-9876 gamma (file edited)"}
    strat = Scripted(script, snapshots={REF: "alpha KEY-9876 beta"})
    d = run_strategy(msgs, strat, counter=WordCounter()).to_dict()
    assert d["repeated_reads"] == 0


def test_fact_retention_in_context_recoverable_lost() -> None:
    r = run()["retention"]
    # call 0: src/app.py (in the task) → in context
    # call 2: KEY-9876 only in the masked c1 result, its snapshot referenced → recoverable;
    #         src/app.py → in context
    # call 3: LOST-4242 only in the dropped c2 round, no ref → lost; KEY-9876 (c3) and
    #         src/app.py → in context
    assert r["facts"] == 6
    assert r["in_context"] == 4
    assert r["recoverable"] == 1
    assert r["lost"] == 1
    assert r["lost_examples"] == ["step 3: LOST-4242"]
    assert r["in_context_rate"] == round(4 / 6, 4)
    assert r["retained_rate"] == round(5 / 6, 4)


def test_identifier_in_dropped_round_recoverable_by_ref_is_not_present() -> None:
    def drop_c1(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [dict(m) for m in convo]
        if step >= 2:  # drop the c1 round, leave a ledger line with its ref
            out[2:4] = [{"role": "system", "content": f"ledger: read src/app.py → {REF}"}]
        return out

    strat = Scripted(drop_c1, snapshots={REF: "alpha KEY-9876 beta"})
    d = run_strategy(trace()[:7], strat, counter=WordCounter()).to_dict()
    assert d["retention"]["recoverable"] == 1
    assert d["retention"]["in_context"] == 2  # src/app.py twice


def test_pairing_violations_counted_per_prepared_list() -> None:
    def orphan(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [dict(m) for m in convo]
        if step == 2:
            del out[4]  # A2 gone, T2 left without its call
        return out

    d = run(fn=orphan, hard_limit=1000)
    assert d["pairing_violations"] == 1
    assert d["steps_with_violations"] == 1


def test_states_and_alerts_from_events() -> None:
    from ctxpolicy.sim.replay import StepRecord, TraceResult

    r = TraceResult(
        trace="t",
        strategy="policy",
        label="p",
        kind="policy",
        model=None,
        window=100,
        reserve_output=10,
    )
    r.steps = [
        StepRecord(
            index=i,
            used=u,
            none=u,
            trigger=100,
            target=50,
            warning=70,
            error=90,
            hard_limit=90,
            state=s,
        )
        for i, (u, s) in enumerate([(10, "normal"), (75, "warning"), (95, "critical")])
    ]
    r.events = [
        {"type": "context.compacted", "layer": "drop_rounds", "before": 100, "after": 5},
        {"type": "context.compacted", "layer": "summarize", "before": 100, "after": 5},
        {"type": "summarizer.failed", "layer": "summarize"},
        {"type": "breaker.open", "layer": "summarize"},
    ]
    r.repeated_reads = 1
    d = r.to_dict()
    assert d["states"] == {"normal": 1, "warning": 1, "critical": 1, "error": 0, "overflow": 0}
    assert d["overflows"] == 1
    assert d["compactions"] == {"drop_rounds": 1, "summarize": 1}
    assert d["compression"] == {
        "attempts": 3,
        "failures": 1,
        "failure_rate": round(1 / 3, 4),
        "mean_ratio": 0.95,
    }
    assert d["summarizer"] == {"calls": 2, "failures": 1}
    assert d["breaker_trips"] == 1
    # design B: ratio 0.95 > 0.9 alerts; 1 repeat > 0.3 × 2 compactions alerts
    assert [a["code"] for a in d["alerts"]] == ["compression_ratio", "repeated_reads"]
    r.alert_ratio, r.alert_repeats = 0.96, 0.5
    assert r.to_dict()["alerts"] == []
