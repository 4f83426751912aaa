from ctxpolicy.conversation import check_units, render
from ctxpolicy.layers.observation_mask import ObservationMask, ObservationMaskOptions
from tests.helpers_conv import Conv, frozen_copy, make_ctx, ref_line


def layer(**kw):
    return ObservationMask(ObservationMaskOptions(**kw))


def conv(n_steps=4, out="x" * 50, ref=False):
    c = Conv().system("sys").user("task")
    for k in range(n_steps):
        o = f"{k}:" + out
        if ref:
            o += "\n" + ref_line("conv", k, "read_file")
        c.step(("read_file", {"path": f"f{k}.py"}, o))
    return c.user("go on")


def tool_texts(units):
    return [m["content"] for m in render(units) if m["role"] == "tool"]


def test_masks_only_old_rounds_exact():
    units = conv().units()
    before = frozen_copy(units)
    res = layer(max_age_rounds=2, max_chars=12, dedupe=False).apply(make_ctx(units), units)
    assert tool_texts(res.units) == [
        "0:xxxxxx\n[… 40 chars elided …]\nxxxx",
        "1:xxxxxx\n[… 40 chars elided …]\nxxxx",
        "2:" + "x" * 50,
        "3:" + "x" * 50,
    ]
    assert units == before
    assert check_units(units, res.units) == []
    assert res.report == {"masked_results": 2, "deduped_results": 0, "chars_saved": 2 * (52 - 35)}
    assert [u.key for u in res.units] == [u.key for u in units]
    assert res.units[2].meta["masked"] is True


def test_keeps_reference_line():
    units = conv(n_steps=2, ref=True).units()
    res = layer(max_age_rounds=1, max_chars=12).apply(make_ctx(units), units)
    first = tool_texts(res.units)[0]
    assert first == (
        "0:xxxxxx\n[… 40 chars elided …]\nxxxx\n"
        "[Full detail available at: /tmp/snap/conv/step_000_read_file.json "
        "(ctxsnap://conv/step_000_read_file)]"
    )


def test_meta_ref_added_when_no_line():
    units = conv(n_steps=2).units()
    units[2] = units[2].replace(meta={"refs": {"call_1": "ctxsnap://conv/step_000_read_file"}})
    res = layer(max_age_rounds=1, max_chars=12).apply(make_ctx(units), units)
    assert tool_texts(res.units)[0].endswith(
        "\n[Full detail available at: ctxsnap://conv/step_000_read_file]"
    )


def test_idempotent_and_short_results_untouched():
    units = conv().units()
    lay = layer(max_age_rounds=1, max_chars=12)
    once = lay.apply(make_ctx(units), units).units
    twice = lay.apply(make_ctx(once), once)
    assert twice.units == once
    assert twice.report["masked_results"] == 0
    short = conv(out="ok").units()
    assert lay.apply(make_ctx(short), short).units == short


def test_dedupe_points_to_last_occurrence():
    same = "identical output " * 5
    c = Conv().user("task")
    c.step(("run_tests", {}, same + "\n" + ref_line("conv", 0, "run_tests")))
    c.step(("grep", {}, "other"))
    c.step(("run_tests", {}, same + "\n" + ref_line("conv", 2, "run_tests")))
    c.step(("run_tests", {}, same))
    c.user("next")
    units = c.units()
    res = layer(max_age_rounds=10).apply(make_ctx(units), units)
    assert tool_texts(res.units) == [
        "[same output as step 3 below]\n" + ref_line("conv", 0, "run_tests"),
        "other",
        "[same output as step 3 below]\n" + ref_line("conv", 2, "run_tests"),
        same,
    ]
    assert res.report["deduped_results"] == 2
    off = layer(max_age_rounds=10, dedupe=False).apply(make_ctx(units), units)
    assert off.units == units


def test_pinned_and_list_content():
    c = Conv().user("task")
    c.messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    )
    c.messages.append(
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "y" * 100}]}
    )
    c.step(("f", {}, "z"))
    c.user("end")
    units = c.units()
    res = layer(max_age_rounds=1, max_chars=10).apply(make_ctx(units), units)
    assert render(res.units)[2]["content"] == [
        {"type": "text", "text": "yyyyyy\n[… 90 chars elided …]\nyyyy"}
    ]
    pinned = [u.replace(pinned=True) if u.kind == "step" else u for u in units]
    assert layer(max_age_rounds=0, max_chars=10).apply(make_ctx(pinned), pinned).units == pinned


def test_a_second_pass_leaves_pointers_and_cut_results_alone():
    # found by the layer property test: a dedupe pointer was masked on the next pass,
    # and pointers were re-pointed at pointers (step 10 -> step 8 is one char shorter)
    c = Conv().user("task")
    for _ in range(7):
        c.step(("read_file", {"a": 1}, ""))
    c.step(("read_file", {"a": 1}, "0" * 31), ("read_file", {"a": 1}, "1" * 40))
    c.step(("read_file", {"a": 1}, "0" * 31))
    c.step(("read_file", {"a": 1}, "1" * 40))
    c.step(("read_file", {"a": 1}, "0" * 31))
    units = c.units()
    for opts in ({"max_age_rounds": 0, "max_chars": 0}, {"max_age_rounds": 2, "max_chars": 10}):
        once = layer(**opts).apply(make_ctx(units, target=0), units)
        assert any("[same output as step" in t for t in tool_texts(once.units))
        twice = layer(**opts).apply(make_ctx(once.units, target=0), once.units)
        assert twice.units == once.units, opts
