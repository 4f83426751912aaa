"""Every metric on a hand-made trace with hand-computed numbers (word counter, scripted strategy)."""

from __future__ import annotations

from typing import Any

from ctxpolicy.sim.metrics import PriceModel, billing, parse_price_model, price_model
from ctxpolicy.sim.replay import run_strategy
from ctxpolicy.sim.rulers import SentTexts, ruler_facts, sent_text

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
    assert ruler_facts("src/app.py") == ["src/app.py", "app.py"]
    assert ruler_facts("KEY-9876 matters") == ["9876"]
    assert ruler_facts("LOST-4242 and KEY-9876") == ["4242", "9876"]
    assert ruler_facts("checking\nls") == []


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


def test_repeat_of_a_result_without_facts_is_not_a_repeated_read() -> None:
    """An edit command's empty output (``<returncode>0</returncode>``) held nothing
    compaction could take away: running it again is not a repeated read."""
    empty = "<returncode>0</returncode>\n<output>\n</output>"
    msgs = trace()
    msgs[3] = {**msgs[3], "content": empty}
    msgs[7] = {**msgs[7], "content": empty}
    msgs[8] = {**msgs[8], "content": empty}
    strat = Scripted(script, snapshots={REF: empty})
    assert run_strategy(msgs, strat, counter=WordCounter()).to_dict()["repeated_reads"] == 0


def test_fact_retention_in_context_recoverable_lost() -> None:
    r = run()["retention"]
    # call 0: src/app.py, app.py (in the task) → in context
    # call 2: 9876 only in the masked c1 result, its snapshot referenced → recoverable
    #         (beside the ruler: not retained); src/app.py, app.py → in context
    # call 3: 4242 only in the dropped c2 round, no ref → lost; 9876 (c3), src/app.py
    #         and app.py → in context
    assert r["facts"] == 9
    assert r["in_context"] == 7
    assert r["recoverable"] == 1
    assert r["lost"] == 1
    assert r["lost_examples"] == ["step 3: 4242"]
    assert r["in_context_rate"] == round(7 / 9, 4)
    assert r["retained_rate"] == round(8 / 9, 4)


def test_identifier_in_dropped_round_recoverable_by_ref_is_not_present() -> None:
    def drop_c1(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = [dict(m) for m in convo]
        if step >= 2:  # drop the c1 round, leave a ledger line with its ref
            out[2:4] = [{"role": "system", "content": f"ledger: read src/app.py → {REF}"}]
        return out

    strat = Scripted(drop_c1, snapshots={REF: "alpha KEY-9876 beta"})
    d = run_strategy(trace()[:7], strat, counter=WordCounter()).to_dict()
    assert d["retention"]["recoverable"] == 1
    assert d["retention"]["in_context"] == 4  # src/app.py and app.py, twice


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


def test_ruler_facts_are_the_issue_kinds() -> None:
    text = (
        "see pkg/mod/file.py and setup.cfg: parse_args, ConfigParser, getValue, os.path.join; "
        "12 items, 1234 rows, 0.25 s, 3.1.4 ok; ValueError, DeprecationWarning; "
        '`run --fast` "quoted span here" "short"'
    )
    facts = ruler_facts(text)
    for f in (
        "pkg/mod/file.py",
        "setup.cfg",
        "parse_args",
        "ConfigParser",
        "getValue",
        "os.path.join",
        "1234",
        "0.25",
        "ValueError",
        "DeprecationWarning",
        "run --fast",
        "quoted span here",
    ):
        assert f in facts, f
    assert "12" not in facts and "short" not in facts


def test_far_retention_counts_facts_absent_from_the_six_messages_before() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are helpful. sys_only_name"},
        {"role": "user", "content": "fix old_function in lib/core.py"},
    ]
    for i in range(4):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [call(f"c{i}", "ls")]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i}"})
    msgs.append({"role": "assistant", "content": "old_function and sys_only_name and lib/core.py"})

    def keep_all(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [dict(m) for m in convo]

    def drop_task(step: int, convo: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [dict(m) for m in convo if m.get("role") != "user"]

    r = run_strategy(msgs, Scripted(keep_all), counter=WordCounter()).to_dict()["retention"]
    # old_function, lib/core.py, core.py: in the task (9 messages back) → far; the
    # system prompt's name is not a fact
    assert (r["facts"], r["in_context"], r["far_facts"], r["far_in_context"]) == (3, 3, 3, 3)
    r = run_strategy(msgs, Scripted(drop_task), counter=WordCounter()).to_dict()["retention"]
    assert (r["facts"], r["in_context"], r["far_facts"], r["far_in_context"]) == (3, 0, 3, 0)
    assert r["far_rate"] == 0.0


def test_billing_under_a_cache_price_model() -> None:
    d = run()
    b = d["billing"]
    assert b["price_model"]["name"] == "anthropic"  # model None: the catalogue default
    # used [3, 9, 19, 27], cached [0, 3, 6, 13]: read 0.1, write 1.25
    billed = 0.1 * 22 + 1.25 * (58 - 22)
    # none [3, 9, 15, 29], its cached prefix the previous call's whole list: [0, 3, 9, 15]
    none = 0.1 * 27 + 1.25 * (56 - 27)
    assert b["billed_input"] == round(billed, 2)
    assert b["billed_input_none"] == round(none, 2)
    assert b["total_cost"] == b["billed_input"]  # no summarizer LLM call
    assert b["billed_ratio"] == round(billed / none, 4)
    assert b["tokens_ratio"] == round(58 / 56, 4)


def test_summarizer_calls_are_billed_from_the_price_model() -> None:
    from ctxpolicy.sim.metrics import StepRecord

    steps = [
        StepRecord(0, 100, 100, 1, 1, 1, 1, 1, "normal", cached=0),
        StepRecord(
            1,
            50,
            200,
            1,
            1,
            1,
            1,
            1,
            "normal",
            cached=10,
            none_cached=100,
            summary_calls=1,
            summary_in=80,
            summary_out=20,
        ),
    ]
    pm = PriceModel("x", cache_read=0.1, cache_write=1.25, summarizer_input=1, summarizer_output=5)
    b = billing(steps, pm)
    assert b["billed_input"] == round(1.25 * 100 + 0.1 * 10 + 1.25 * 40, 2)
    assert b["summarizer"] == {"llm_calls": 1, "input_tokens": 80, "output_tokens": 20}
    assert b["total_cost"] == round(b["billed_input"] + 80 + 100, 2)
    assert b["billed_input_none"] == round(1.25 * 100 + 0.1 * 100 + 1.25 * 100, 2)


def test_price_models_from_the_catalogue_and_overrides() -> None:
    assert price_model("anthropic").to_dict() == {
        "name": "anthropic",
        "cache_read": 0.1,
        "cache_write": 1.25,
        "summarizer_input": 1.0,
        "summarizer_output": 5.0,
    }
    gpt41 = price_model(None, "gpt-4.1")
    assert (gpt41.name, gpt41.cache_read, gpt41.cache_write) == ("openai", 0.25, 1.0)
    assert price_model(None, "claude-sonnet-4").name == "anthropic"
    assert price_model(None, "no-such-model").name == "anthropic"
    name, over = parse_price_model("openai,cache_read=0.2")
    assert price_model(name, "gpt-4o", over).cache_read == 0.2
    for bad in ("nope", "openai,cache_read=x", "openai,bogus=1", "cache_read=-1"):
        try:
            n, o = parse_price_model(bad)
            price_model(n, None, o)
        except ValueError as exc:
            assert "Traceback" not in str(exc)
        else:
            raise AssertionError(bad)


def test_sent_texts_builds_a_kept_message_once_and_notices_a_changed_one() -> None:
    texts = SentTexts(max_messages=3)
    m: dict[str, Any] = {
        "role": "assistant",
        "content": "reading /src/a.py",
        "tool_calls": [{"id": "1", "function": {"name": "read", "arguments": '{"p": "x.py"}'}}],
    }
    assert texts(m) == sent_text(m)
    assert texts(m) is texts(m)  # remembered
    m["content"] = "reading /src/b.py"  # a caller that does mutate is still measured right
    assert texts(m) == sent_text(m) and "b.py" in texts(m)
    m["tool_calls"] = []
    assert texts(m) == sent_text(m) and "x.py" not in texts(m)
    others = [{"role": "user", "content": f"u{i}"} for i in range(5)]
    assert [texts(o) for o in others] == [sent_text(o) for o in others]
    assert len(texts._by_id) <= 3  # bounded


def test_own_text_ruler_instructions_share_and_duplicates() -> None:
    from ctxpolicy.sim.rulers import OwnTextRuler, sent_text

    ruler = OwnTextRuler(lambda m: len(str(m.get("content") or "")))
    convo = [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Refund order #W123; never change the address."},
        {"role": "assistant", "content": "Looking up order #W123 now, one moment."},
        {"role": "user", "content": "Also cancel order #W456."},
    ]
    for m in convo:
        ruler.add(m)
    # everything sent: both user turns kept, nothing of ours
    assert ruler.measure(convo, sent_text) == (2, 2, 0, 0)
    ledger = {
        "role": "system",
        "content": "[ctxpolicy progress ledger]\nLooking up order #W123 now, one moment.",
    }
    summary = {"role": "user", "content": "Summary: the user wants a refund."}
    prepared = [convo[0], ledger, summary, convo[3]]
    checked, kept, own_tokens, dup = ruler.measure(prepared, sent_text)
    assert (checked, kept) == (2, 1)  # the first instruction was summarized away
    assert own_tokens == len(ledger["content"]) + len(summary["content"])
    assert dup == 0  # the assistant line is not sent twice here
    prepared = [convo[0], ledger, summary, convo[2], convo[3]]
    assert ruler.measure(prepared, sent_text)[3] == 1  # the ledger repeats a sent line


def test_needless_compactions_and_summary_fields() -> None:
    from ctxpolicy.sim.metrics import StepRecord, TraceResult, summarize_results

    def step(i: int, none: int, layers: list[str]) -> StepRecord:
        return StepRecord(
            index=i, used=none // 2, none=none, trigger=800, target=400, warning=560,
            error=720, hard_limit=1000, state="normal", layers=layers,
        )  # fmt: skip

    fits = TraceResult("a", "policy", "p", "policy", None, 1200, 200)
    fits.steps = [step(0, 500, []), step(1, 900, ["summarize"])]
    fits.instructions = {"checked": 4, "retained": 3}
    over = TraceResult("b", "policy", "p", "policy", None, 1200, 200)
    over.steps = [step(0, 900, ["summarize"]), step(1, 1500, ["summarize"])]
    a, b = fits.to_dict(), over.to_dict()
    assert a["fits_uncompacted"] and a["needless_compactions"] == 1
    assert not b["fits_uncompacted"] and b["needless_compactions"] == 0
    assert a["instructions"] == {"checked": 4, "retained": 3, "rate": 0.75}
    total = summarize_results([a, b])["p"]
    assert total["needless_compactions"] == 1 and total["instructions"]["rate"] == 0.75
