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
