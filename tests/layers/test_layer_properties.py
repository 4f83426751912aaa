"""Property tests: every built-in layer on random conversations."""

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation import check_units, to_units
from ctxpolicy.engine.ledger import ProgressLedger
from ctxpolicy.layers.drop_rounds import DropRounds, DropRoundsOptions
from ctxpolicy.layers.emergency import Emergency, EmergencyOptions
from ctxpolicy.layers.observation_mask import ObservationMask, ObservationMaskOptions
from ctxpolicy.layers.offload import Offload, OffloadOptions
from ctxpolicy.layers.summarize import Summarize, SummarizeOptions
from tests.helpers_conv import approx_count, conversations, make_ctx
from tests.layers.test_offload import MemStore

LAYERS = st.one_of(
    st.builds(
        lambda a, c, d: ObservationMask(
            ObservationMaskOptions(max_age_rounds=a, max_chars=c, dedupe=d)
        ),
        st.integers(0, 4),
        st.integers(0, 60),
        st.booleans(),
    ),
    st.builds(
        lambda k, t: DropRounds(DropRoundsOptions(keep_recent_rounds=k, min_keep_tokens=t)),
        st.integers(0, 4),
        st.sampled_from([0, 50, 10000]),
    ),
    st.builds(
        lambda k, s: Emergency(
            EmergencyOptions(keep_recent_rounds=k, keep_summary=s, max_result_chars=50)
        ),
        st.integers(0, 3),
        st.booleans(),
    ),
    st.builds(
        lambda k, r: Summarize(
            SummarizeOptions(
                keep_recent_rounds=k, min_region_tokens=r, max_input_tokens=600, timeout_s=None
            )
        ),
        st.integers(0, 3),
        st.sampled_from([0, 200]),
    ),
    st.builds(lambda k: Offload(OffloadOptions(keep_recent_rounds=k)), st.integers(0, 3)),
)


def run(layer, units, target, store):
    return layer.apply(
        make_ctx(units, target=target, snapshots=store, constraints=("KEEP-ME",)), units
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=conversations(),
    layer=LAYERS,
    target=st.sampled_from([0, 100, 10**6]),
    store=st.booleans(),
)
def test_layer_invariants(messages, layer, target, store):
    original = copy.deepcopy(messages)
    units, _ = to_units(messages)
    snapshot = copy.deepcopy(units)
    s = MemStore() if store else None
    res = run(layer, units, target, s)
    # invariants, pinned kept, no mutation
    assert check_units(units, res.units) == []
    assert units == snapshot and messages == original
    # dropped units come from the input and are not in the output
    out_keys = {u.key for u in res.units}
    in_keys = {u.key for u in units}
    assert all(u.key in in_keys and u.key not in out_keys for u in res.dropped)
    # never grows (summaries replace at least their input)
    assert approx_count(res.units) <= approx_count(units) or res.units == list(units)
    # deterministic
    again = run(layer, units, target, MemStore() if store else None)
    assert again.units == res.units and again.report == res.report
    # the ledger accepts whatever was dropped
    led = ProgressLedger(max_tokens=200)
    led.update(res.dropped)
    led.render()
    # idempotent where meaningful
    if isinstance(layer, ObservationMask):
        assert run(layer, res.units, target, None).units == res.units
    if isinstance(layer, Emergency):
        twice = run(layer, res.units, target, None)
        assert twice.dropped == [] or all(u.kind == "summary" for u in twice.dropped)
    # constraints survive a summary
    for u in res.units:
        if u.kind == "summary" and not u.meta.get("offload"):
            assert "KEEP-ME" in u.messages[0]["content"]
