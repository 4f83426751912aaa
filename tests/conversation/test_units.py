"""Units, repairs and the pairing checker."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import (
    MISSING_RESULT,
    Unit,
    check_messages,
    check_units,
    group_units,
    render,
    to_units,
)


def _call(cid: str, name: str = "read_file") -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


CONV = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": None, "tool_calls": [_call("a"), _call("b")]},
    {"role": "tool", "tool_call_id": "b", "content": "B"},
    {"role": "tool", "tool_call_id": "a", "content": "A"},
    {"role": "assistant", "content": "thinking"},
    {"role": "user", "content": "more"},
]


def test_units_group_parallel_calls_in_call_order() -> None:
    units, repairs = to_units(CONV)
    assert [u.kind for u in units] == ["system", "user", "step", "step", "user"]
    assert repairs == []
    step = units[2]
    assert [m.get("tool_call_id") for m in step.messages[1:]] == ["a", "b"]
    assert step.round == 0 and units[3].round == 1
    assert [u.pinned for u in units] == [True, True, False, False, True]


def test_missing_result_is_completed_and_reported() -> None:
    msgs = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [_call("z")]}]
    units, repairs = to_units(msgs)
    assert [r.kind for r in repairs] == ["missing_result"]
    assert units[1].messages[1] == {"role": "tool", "tool_call_id": "z", "content": MISSING_RESULT}
    assert check_messages(render(units)) == []


def test_orphan_result_becomes_user_text() -> None:
    msgs = [
        {"role": "user", "content": "x"},
        {"role": "tool", "tool_call_id": "q", "content": "out"},
    ]
    units, repairs = to_units(msgs)
    assert [r.kind for r in repairs] == ["orphan_result"]
    assert units[1].kind == "orphan"
    assert units[1].messages[0]["role"] == "user"
    assert "out" in units[1].messages[0]["content"]
    assert check_messages(render(units)) == []


def test_check_messages_finds_both_directions() -> None:
    bad = [
        {"role": "assistant", "tool_calls": [_call("1")]},
        {"role": "user", "content": "interrupt"},
        {"role": "tool", "tool_call_id": "9", "content": "x"},
    ]
    codes = [v.code for v in check_messages(bad)]
    assert codes == ["missing_result", "orphan_result"]


def test_keys_are_positional_and_content_based() -> None:
    a, _ = to_units(CONV)
    b, _ = to_units([*CONV, {"role": "user", "content": "again"}])
    assert [u.key for u in a] == [u.key for u in b[: len(a)]]
    c, _ = to_units([CONV[0], {"role": "user", "content": "other task"}, *CONV[2:]])
    assert a[1].key != c[1].key and a[0].key == c[0].key


def test_check_units_flags_removed_pinned_and_reordering() -> None:
    units, _ = to_units(CONV)
    assert check_units(units, units) == []
    without_task = [u for u in units if u.kind != "user" or u.messages[0]["content"] != "task"]
    assert [v.code for v in check_units(units, without_task)] == ["pinned_missing"]
    swapped = [units[0], units[1], units[3], units[2], units[4]]
    assert "order" in [v.code for v in check_units(units, swapped)]


def test_summary_unit_records_origin() -> None:
    units, _ = to_units(CONV)
    s = Unit.summary("sum", units[2:4])
    assert s.kind == "summary" and s.origin == (units[2].key, units[3].key)
    assert s.messages[0]["role"] == "user"


def test_to_units_does_not_mutate_input() -> None:
    original = copy.deepcopy(CONV)
    units, _ = to_units(CONV)
    units[2].messages[0]["content"] = "changed"
    assert original == CONV


_msg = st.one_of(
    st.builds(lambda t: {"role": "user", "content": t}, st.text(max_size=20)),
    st.builds(lambda t: {"role": "assistant", "content": t}, st.text(max_size=20)),
    st.builds(
        lambda ids: {"role": "assistant", "content": None, "tool_calls": [_call(i) for i in ids]},
        st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4),
    ),
    st.builds(
        lambda i: {"role": "tool", "tool_call_id": i, "content": "r"}, st.sampled_from("abcdefg")
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_msg, max_size=30))
def test_any_input_renders_to_valid_pairs(msgs: list[dict]) -> None:
    units, _ = to_units(msgs)
    assert check_messages(render(units)) == []


@settings(max_examples=300, deadline=None)
@given(st.lists(_msg, max_size=30), st.integers(0, 5))
def test_sources_name_exactly_the_verbatim_units(msgs: list[dict], offset: int) -> None:
    """``group_units(sources=...)``: a unit with sources holds copies of exactly those
    input messages (in its order); a unit a repair changed or made up has none."""
    sources: list[tuple[int, ...] | None] = []
    units, _, repairs = group_units(msgs, offset=offset, sources=sources)
    assert len(sources) == len(units)
    for u, src in zip(units, sources, strict=True):
        if src is not None:
            originals = [msgs[j - offset] for j in src]
            assert list(u.messages) == originals
            assert all(a is not b for a, b in zip(u.messages, originals, strict=True))
        else:  # something in it is not a verbatim copy of an input message
            assert u.kind == "orphan" or any(m not in msgs for m in u.messages)
    if not repairs and all(isinstance(m, dict) and m.get("tool_calls") != [] for m in msgs):
        assert None not in sources


def test_replace_makes_what_dataclasses_replace_makes() -> None:
    """``Unit.replace`` (no ``__init__`` for the plain fields) = ``dataclasses.replace``."""
    import dataclasses

    u = Unit(kind="step", messages=({"role": "assistant", "content": "x"},), key="k", round=3)
    for changes in (
        {"pinned": True},
        {"meta": {"refs": {"a": "ctxsnap://r"}}},
        {"messages": [{"role": "assistant", "content": "y"}], "meta": {"masked": True}},
        {"kind": "summary", "round": None},
    ):
        fast = u.replace(**dict(changes))
        if "messages" in changes:
            changes = {**changes, "messages": tuple(changes["messages"])}
        slow = dataclasses.replace(u, **changes)
        assert fast == slow and vars(fast) == vars(slow)
        assert type(fast.messages) is tuple and fast.origin == ("k",)
    # a new key goes through __post_init__ (origin set from the key when emptied)
    assert u.replace(key="n", origin=()).origin == ("n",)
    try:
        u.replace(nope=1)
    except TypeError:
        pass
    else:  # pragma: no cover
        raise AssertionError("an unknown field must raise like dataclasses.replace")


def test_grouped_units_equal_constructed_ones() -> None:
    """The grouping builds its units without ``Unit.__init__``: the same objects."""
    units, _, _ = group_units(CONV)
    for u in units:
        made = Unit(kind=u.kind, messages=u.messages, key=u.key, round=u.round, pinned=u.pinned)
        assert u == made and vars(u) == vars(made)
    assert len({id(u.meta) for u in units}) == len(units)  # a meta of its own each
