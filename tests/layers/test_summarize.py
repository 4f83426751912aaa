import time

from ctxpolicy.components import SummaryRequest
from ctxpolicy.conversation import check_units
from ctxpolicy.layers.summarize import Summarize, SummarizeOptions, chunk_units
from ctxpolicy.summarizers.callable import CallableSummarizer
from tests.helpers_conv import Conv, make_ctx


def conv(n=6, size=300):
    c = Conv().system("sys").user("Fix bug AUTH-7 in src/a.py")
    for k in range(n):
        c.step(("read_file", {"path": f"src/f{k}.py"}, f"{k}" * size), text=f"thinking {k}")
    return c.user("continue")


def ctx_with(fn, units, **kw):
    calls = []

    def factory(name, options):
        calls.append((name, dict(options)))
        return CallableSummarizer.from_function(fn)

    ctx = make_ctx(units, summarizer=factory, **kw)
    return ctx, calls


def layer(**kw):
    kw.setdefault("min_region_tokens", 0)
    return Summarize(SummarizeOptions(**kw))


def test_folds_old_units_into_one_summary():
    units = conv().units()
    seen: list[SummaryRequest] = []

    def fn(req):
        seen.append(req)
        return "S: " + ",".join(m["role"] for m in req.messages)

    ctx, calls = ctx_with(fn, units, constraints=("never push",))
    res = layer(keep_recent_rounds=2, summarizer="callable").apply(ctx, units)
    assert [(u.kind, u.round) for u in res.units] == [
        ("system", None),
        ("user", None),
        ("summary", None),
        ("step", 4),
        ("step", 5),
        ("user", None),
    ]
    summary = res.units[2]
    assert summary.messages[0]["content"] == (
        "S: assistant,tool,assistant,tool,assistant,tool,assistant,tool\n"
        "Constraints (verbatim):\n- never push"
    )
    assert summary.origin == tuple(k for u in units[2:6] for k in u.origin)
    assert res.dropped == units[2:6]
    assert calls == [("callable", {})]
    assert seen[0].previous_summary is None and seen[0].constraints == ("never push",)
    assert check_units(units, res.units) == []
    assert ctx.memory == {"failures": 0, "open": False, "skipped": 0}


def test_merges_previous_summary():
    units = conv().units()
    ctx, _ = ctx_with(lambda r: f"prev=[{r.previous_summary}] +{len(r.messages)}", units)
    once = layer(keep_recent_rounds=4, summarizer="callable").apply(ctx, units).units
    assert once[2].messages[0]["content"] == "prev=[None] +4"
    twice = layer(keep_recent_rounds=2, summarizer="callable").apply(ctx, once)
    assert [u.kind for u in twice.units].count("summary") == 1
    assert twice.units[2].messages[0]["content"] == "prev=[prev=[None] +4] +4"
    assert twice.report["merged_summaries"] == 1


def test_chunked_fold_with_bounded_input():
    units = conv(n=8, size=2000).units()
    sizes = []

    def fn(req):
        sizes.append(sum(len(str(m.get("content") or "")) for m in req.messages))
        return f"part{len(sizes)} after {req.previous_summary}"

    ctx, _ = ctx_with(fn, units)
    res = layer(
        keep_recent_rounds=1, summarizer="callable", max_input_tokens=1024, max_summary_tokens=100
    ).apply(ctx, units)
    assert res.report["chunks"] == len(sizes) > 1
    assert max(sizes) < 1024 * 4
    assert res.units[2].messages[0]["content"].startswith(f"part{len(sizes)} after part")


def test_chunk_units_shrinks_oversized_unit():
    units = conv(n=1, size=40000).units()
    chunks = chunk_units(units[2:3], 500, lambda t: len(t) // 4)
    assert len(chunks) == 1
    assert "chars elided" in chunks[0][1]["content"]


def failing(kind):
    def fn(req):
        if kind == "raise":
            raise RuntimeError("boom")
        if kind == "empty":
            return "  "
        if kind == "nonstr":
            return 42
        if kind == "long":
            return "word " * 5000
        if kind == "slow":
            time.sleep(0.5)
            return "late"
        return "x"

    return fn


def test_failures_leave_history_and_open_breaker():
    units = conv().units()
    for kind, reason in [
        ("raise", "RuntimeError: boom"),
        ("empty", "empty summary"),
        ("nonstr", "summarizer returned int, not str"),
        ("slow", "timeout after 0.05s"),
    ]:
        ctx, _ = ctx_with(failing(kind), units)
        res = layer(summarizer="callable", timeout_s=0.05).apply(ctx, units)
        assert res.units == units and res.dropped == []
        assert res.report["failed"] == reason
    ctx, _ = ctx_with(failing("long"), units)
    res = layer(summarizer="callable", max_summary_tokens=50).apply(ctx, units)
    assert res.report["failed"].startswith("summary of ")
    # breaker
    ctx, _ = ctx_with(failing("raise"), units)
    lay = layer(summarizer="callable", max_failures=2, retry_after=2)
    for _ in range(2):
        assert "failed" in lay.apply(ctx, units).report
    assert [e["type"] for e in ctx.emit] == [
        "summarizer.failed",
        "summarizer.failed",
        "breaker.open",
    ]
    assert lay.apply(ctx, units).report == {"skipped": "breaker_open"}
    # half-open after retry_after skips; success closes it
    ok_ctx, _ = ctx_with(lambda r: "ok", units, memory=ctx.memory)
    res = lay.apply(ok_ctx, units)
    assert res.report["summarized_units"] == 3
    assert [e["type"] for e in ok_ctx.emit] == ["breaker.closed"]
    assert ok_ctx.memory["failures"] == 0


def test_summary_longer_than_input_is_failure_and_small_region_skipped():
    units = conv(n=4, size=1).units()
    ctx, _ = ctx_with(lambda r: "y" * 3000, units)
    res = layer(summarizer="callable", keep_recent_rounds=3).apply(ctx, units)
    assert res.report["failed"].startswith("summary (")
    res = Summarize(SummarizeOptions(summarizer="callable", keep_recent_rounds=3)).apply(ctx, units)
    assert res.report == {"skipped": "region too small"}
    assert layer(keep_recent_rounds=10).apply(ctx, units).report == {"skipped": "no old rounds"}


def test_extractive_default_end_to_end():
    units = conv().units()
    ctx = make_ctx(units, constraints=("Do not modify tests/",))
    res = Summarize(SummarizeOptions(min_region_tokens=0)).apply(ctx, units)
    text = res.units[2].messages[0]["content"]
    assert text.startswith("[Summary of earlier conversation (extractive digest)]")
    assert "Do not modify tests/" in text and "src/f0.py" in text
    assert res.units[2].meta["summarizer"] == "extractive"
    again = Summarize(SummarizeOptions(min_region_tokens=0)).apply(make_ctx(res.units), res.units)
    assert again.report == {"skipped": "no old rounds"} and again.units == res.units


def test_an_in_process_summarizer_is_called_without_a_thread():
    import threading

    from ctxpolicy.summarizers.extractive import ExtractiveSummarizer

    threads: list[threading.Thread] = []

    class Local(CallableSummarizer):
        in_process = True

    def fn(req):
        threads.append(threading.current_thread())
        return "S"

    units = conv().units()
    for cls, same in ((Local, True), (CallableSummarizer, False)):
        threads.clear()
        ctx = make_ctx(units, summarizer=lambda name, options, c=cls: c.from_function(fn))
        res = layer(summarizer="callable", timeout_s=5).apply(ctx, units)
        assert res.report.get("summarized_units") and threads
        assert all((t is threading.current_thread()) == same for t in threads)
    assert ExtractiveSummarizer.in_process and not CallableSummarizer.in_process


def _long_fold(steps: int = 30, ask: str = "Also keep the public API stable") -> list:
    c = Conv().system("sys").user("Fix bug AUTH-7 in src/a.py")
    c.step(("read_file", {"path": "src/first.py"}, "0" * 2000), text="start")
    c.user(ask)  # in the fold: what the unread part asks
    for k in range(steps):
        c.step(("read_file", {"path": f"src/f{k}.py"}, f"{k % 10}" * 2000), text=f"thinking {k}")
    return c.user("continue").units()


def test_a_fold_needing_more_than_max_chunks_reads_the_newest_chunks_and_the_task():
    units = _long_fold()
    seen: list[SummaryRequest] = []

    def fn(req):
        seen.append(req)
        return f"part{len(seen)}"

    opts = {"keep_recent_rounds": 1, "summarizer": "callable", "max_input_tokens": 1024}
    ctx, _ = ctx_with(fn, units)
    whole = layer(**opts, max_chunks=None).apply(ctx, units)
    read_whole = [r.messages for r in seen]
    assert len(read_whole) == whole.report["chunks"] > 3 and "unread_units" not in whole.report
    seen.clear()
    ctx, _ = ctx_with(fn, units)
    res = layer(**opts, max_chunks=3).apply(ctx, units)
    assert len(seen) == res.report["chunks"] == 3
    assert 0 < res.report["unread_units"] < len(res.dropped)
    assert res.dropped == whole.dropped  # every unit of the region is folded, read or not
    assert [u.kind for u in res.units] == [u.kind for u in whole.units]
    # the newest chunk is the whole fold's newest here; the task goes first
    assert seen[0].messages[0]["content"] == "Also keep the public API stable"
    assert seen[-1].messages == read_whole[-1]
    assert res.report["input_tokens"] < whole.report["input_tokens"]
    assert check_units(units, res.units) == []


def test_a_fold_within_max_chunks_is_read_whole():
    units = _long_fold(steps=6)
    for cap in (None, 16, "auto"):
        seen: list[SummaryRequest] = []
        ctx, _ = ctx_with(lambda r, seen=seen: seen.append(r) or "S", units)
        res = layer(
            keep_recent_rounds=1, summarizer="callable", max_input_tokens=1024, max_chunks=cap
        ).apply(ctx, units)
        assert "unread_units" not in res.report
        if cap is None:
            expected = [r.messages for r in seen]
        else:
            assert [r.messages for r in seen] == expected


def test_the_task_of_the_unread_units_is_shortened_to_keep_each_call_in_its_budget():
    from ctxpolicy.layers.summarize import _msg_tokens
    from tests.helpers_conv import approx_text

    units = _long_fold(ask="Also keep the public API stable. " * 400)
    seen: list[SummaryRequest] = []
    ctx, _ = ctx_with(lambda r: seen.append(r) or "S", units)
    res = layer(
        keep_recent_rounds=1, summarizer="callable", max_input_tokens=1024, max_chunks=2
    ).apply(ctx, units)
    assert len(seen) == 2 and res.report["unread_units"] > 0
    first = seen[0].messages[0]["content"]
    assert first.startswith("Also keep the public API stable.") and len(first) < 4000
    for req in seen:
        assert sum(_msg_tokens(m, approx_text) for m in req.messages) <= 1024


def test_auto_reads_two_windows_of_history():
    units = _long_fold(steps=60)
    for window in (1500, 100_000):
        seen: list[SummaryRequest] = []
        ctx, _ = ctx_with(lambda r, seen=seen: seen.append(r) or "S", units, window=window)
        res = layer(keep_recent_rounds=1, summarizer="callable", max_input_tokens=1024).apply(
            ctx, units
        )
        if window == 1500:  # two windows are far less than the fold: a few chunks read
            # (a 1024-token request with room for a 1200-token summary: 256-token chunks)
            assert res.report["unread_units"] > 40 and len(seen) == -(-2 * window // 256)
        else:  # the whole fold is within two windows: read whole
            assert "unread_units" not in res.report and len(seen) > 5


def test_a_summary_that_drops_a_user_turn_is_repaired_verbatim():
    from ctxpolicy.layers.summarize import REPAIR_HEADER, repair, strip_repair

    c = Conv().system("s").user("task")
    c.step(("bash", {"command": "ls"}, "a.py\n" * 100))
    c.user("Never touch prod.\n- keep the API\n- reply in French")
    c.step(("bash", {"command": "cat a.py"}, "x = 1\n" * 100))
    for k in range(3):
        c.step(("bash", {"command": f"echo {k}"}, "ok\n" * 50))
    units = c.user("go").units()

    def forgetful(name, options):
        return CallableSummarizer.from_function(lambda req: "Goal: task. Done: ls, cat.")

    ctx = make_ctx(units, summarizer=forgetful, constraints=("No force pushes",))
    res = Summarize(SummarizeOptions(summarizer="callable", keep_recent_rounds=2)).apply(ctx, units)
    (summary,) = [u for u in res.units if u.kind == "summary"]
    text = summary.messages[0]["content"]
    assert "Never touch prod.\n- keep the API\n- reply in French" in text
    assert REPAIR_HEADER in text and "- No force pushes" in text
    assert summary.meta["user_turns"] == ["Never touch prod.\n- keep the API\n- reply in French"]
    assert strip_repair(text).endswith("- No force pushes")
    # bounded: the newest turns within the budget, the older ones counted
    many = [f"instruction {i} " + "w " * 30 for i in range(10)]
    out = repair("S", (), many, budget=100)
    assert many[-1] in out and many[0] not in out
    assert "earlier user turns are in the compacted history)" in out
    assert repair("S " + " ".join(many), (), many) == "S " + " ".join(many)  # nothing missing


def test_names_the_agent_wrote_are_kept_with_any_summary():
    """``names``: the code names of the folded replies and call arguments a summary
    left out are appended on one line, carried to the next fold in ``meta``."""
    from ctxpolicy.layers.summarize import NAMES_HEADER, strip_repair, with_names

    c = Conv().system("s").user("Fix the collation")
    c.step(
        ("bash", {"command": "grep -n rel_db_params a.py"}, "x\n" * 50), text="See new_rel.field"
    )
    c.step(("bash", {"command": "cat a.py"}, "y\n" * 50), text="rel_db_params again")
    for k in range(2):
        c.step(("bash", {"command": f"echo {k}"}, "ok\n" * 50))
    units = c.user("go").units()
    seen: list[SummaryRequest] = []

    def fn(req):
        seen.append(req)
        return "Goal: collation."

    ctx, _ = ctx_with(fn, units)
    res = layer(summarizer="callable", keep_recent_rounds=2, names=5).apply(ctx, units)
    (summary,) = [u for u in res.units if u.kind == "summary"]
    text = summary.messages[0]["content"]
    assert text == f"Goal: collation.\n{NAMES_HEADER} rel_db_params, a.py, new_rel.field"
    assert summary.meta["names"] == ["rel_db_params", "a.py", "new_rel.field"]
    assert strip_repair(text) == "Goal: collation."
    # the next fold: the summarizer reads the summary without the line; the names stay
    more = [*res.units[:-1], *Conv().step(("bash", {"command": "ls"}, "z\n" * 50)).units()]
    more += [*Conv().step(("bash", {"command": "pwd"}, "w\n" * 50)).units()]
    more += [*Conv().step(("bash", {"command": "id"}, "v\n" * 50)).units(), res.units[-1]]
    again = layer(summarizer="callable", keep_recent_rounds=2, names=5).apply(ctx, more)
    assert seen[-1].previous_summary == "Goal: collation."
    (s2,) = [u for u in again.units if u.kind == "summary"]
    assert s2.meta["names"][-3:] == ["rel_db_params", "a.py", "new_rel.field"]
    # bounded, in order, nothing said twice; off by default
    assert with_names("S rel_db_params", ["rel_db_params"], 50, len) == "S rel_db_params"
    assert with_names("S", ["alpha_beta", "gamma_delta"], 45, len).endswith("alpha_beta")
    plain = layer(summarizer="callable", keep_recent_rounds=2).apply(ctx, units)
    (plain_summary,) = [u for u in plain.units if u.kind == "summary"]
    assert NAMES_HEADER not in plain_summary.messages[0]["content"]
