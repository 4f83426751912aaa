from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_units
from ctxpolicy.layers.drop_rounds import DropRounds, DropRoundsOptions
from tests.helpers_conv import Conv, approx_count, frozen_copy, make_ctx


def layer(**kw):
    return DropRounds(DropRoundsOptions(**kw))


def conv(n=6, size=400):
    c = Conv().system("sys").user("task")
    for k in range(n):
        if k == 2:
            c.user(f"side remark {k}")
        c.step(("read_file", {"path": f"f{k}.py"}, f"{k}" * size))
    return c.user("go on")


def kinds(units):
    return [(u.kind, u.round) for u in units]


def test_drops_oldest_until_target():
    units = conv().units()
    before = frozen_copy(units)
    per_round = approx_count([units[2]])
    total = approx_count(units)
    # target reachable after dropping exactly two rounds (the 2nd has a user unit before it? no: 3rd)
    ctx = make_ctx(units, target=total - 2 * per_round)
    res = layer(keep_recent_rounds=1, min_keep_tokens=0).apply(ctx, units)
    assert kinds(res.units) == [
        ("system", None),
        ("user", None),
        ("user", None),
        ("step", 2),
        ("step", 3),
        ("step", 4),
        ("step", 5),
        ("user", None),
    ]
    assert [u.round for u in res.dropped] == [0, 1]
    assert res.report == {"dropped_rounds": 2, "dropped_units": 2, "stopped_by": "target"}
    assert units == before
    assert check_units(units, res.units) == []


def test_round_includes_user_units_before_step():
    units = conv().units()
    ctx = make_ctx(units, target=0)
    res = layer(keep_recent_rounds=2, min_keep_tokens=0).apply(ctx, units)
    assert kinds(res.units) == [
        ("system", None),
        ("user", None),
        ("step", 4),
        ("step", 5),
        ("user", None),
    ]
    assert [u.kind for u in res.dropped] == ["step", "step", "user", "step", "step"]
    assert res.report["stopped_by"] == "keep_recent_rounds"


def test_min_keep_tokens_and_no_op_when_under_target():
    units = conv().units()
    per_round = approx_count([units[2]])
    res = layer(keep_recent_rounds=0, min_keep_tokens=3 * per_round).apply(
        make_ctx(units, target=0), units
    )
    # rounds 0..2 can go: after round 2 there are rounds 3,4,5 + last user (> 3 rounds)
    assert [u.round for u in res.units if u.kind == "step"] == [3, 4, 5]
    assert res.report["stopped_by"] == "min_keep_tokens"
    same = layer().apply(make_ctx(units, target=10**9), units)
    assert same.units == units and same.dropped == []
    assert same.report["stopped_by"] == "target"


# --------------------------------------------------------------------------- plan by sums


def recount_plan(count, units, *, keep_recent_rounds, min_keep_tokens, target):
    """The plan as defined: recount the remaining list after every round."""
    from ctxpolicy.layers._util import round_groups

    groups = round_groups(units)
    drop: set[int] = set()
    if count(units) <= target:
        return drop, 0, "target"
    n, reason = 0, "keep_recent_rounds"
    for g in groups[: max(0, len(groups) - keep_recent_rounds)]:
        if min_keep_tokens > 0 and count(units[g[-1] + 1 :]) < min_keep_tokens:
            return drop, n, "min_keep_tokens"
        drop.update(g)
        n += 1
        if count([u for i, u in enumerate(units) if i not in drop]) <= target:
            return drop, n, "target"
    return drop, n, reason


def framed(units):
    """A count that is not the sum of its units' counts: 3 tokens per list plus a
    share per unit that grows with the list (a framing that is not additive)."""
    return approx_count(units) + 3 + len(units) * len(units) // 40


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(0, 40),
    size=st.integers(1, 300),
    keep=st.integers(0, 5),
    min_keep=st.sampled_from([0, 50, 400]),
    share=st.floats(0.0, 1.2),
)
def test_plan_by_sums_is_the_recount_plan(n, size, keep, min_keep, share) -> None:
    units = conv(n, size).units()
    target = int(approx_count(units) * share)
    opts = {"keep_recent_rounds": keep, "min_keep_tokens": min_keep}
    # an additive count: the same rounds, the same reason
    res = layer(**opts).apply(make_ctx(units, target=target), units)
    drop, rounds, reason = recount_plan(approx_count, units, target=target, **opts)
    assert [u.key for u in res.dropped] == [units[i].key for i in sorted(drop)]
    assert (res.report["dropped_rounds"], res.report["stopped_by"]) == (rounds, reason)
    # a count that is not additive: the estimate is corrected by exact recounts, so
    # "target" still means the kept list counts <= target
    res = layer(**opts).apply(make_ctx(units, target=target, count=framed), units)
    if res.report["stopped_by"] == "target":
        assert framed(res.units) <= target
    assert check_units(units, res.units) == []
