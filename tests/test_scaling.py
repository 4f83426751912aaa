"""``prepare`` and the built-in layers are linear in the number of messages (issue 21).

Ratios only, never a wall-clock limit: the work (messages the token counter looks
up, messages a layer hands to ``ctx.count``) at 8× the size must be < 8 × 1.25 of
the work at 1×, and the time of one ``prepare`` (best of 3, garbage collector off)
< 8 × 1.6. The quadratic code this replaces looked up 1,937,860 messages for a
2,000-message conversation (benchmarks/bench_scaling.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from benchmarks.bench_scaling import prepare_once, scaling_policy, tiny_session
from ctxpolicy.components import Layer
from ctxpolicy.conversation import Unit
from ctxpolicy.plugins import get_registry
from tests.helpers_conv import Conv, approx_count, make_ctx

SMALL, LARGE = 1_000, 8_000
SIZE = LARGE / SMALL
#: A budget that 1,000 tiny messages exceed many times over, so that compaction drops
#: nearly the same share at both sizes (what is dropped is read by the ledger and
#: archived: work proportional to it, linear but not to the size when the share moves).
AGENT, WINDOW = "coding_agent_16k", 8192


def test_prepare_looks_up_each_message_a_bounded_number_of_times(tmp_path) -> None:
    policy = scaling_policy(str(tmp_path), agent=AGENT, window=WINDOW)
    small = prepare_once(policy, tiny_session(SMALL))[1]
    large = prepare_once(policy, tiny_session(LARGE))[1]
    assert small >= SMALL  # every message is counted (and compaction ran at both sizes)
    assert large / small < SIZE * 1.25, (small, large)
    # each message: its input lookup, the count of the prepared list, and a layer's count
    # of the region it folds (summarize); per-round recounting would be rounds × this
    assert large < 4 * LARGE


def test_prepare_time_grows_linearly(tmp_path) -> None:
    policy = scaling_policy(str(tmp_path), agent=AGENT, window=WINDOW)
    small_msgs, large_msgs = tiny_session(SMALL), tiny_session(LARGE)
    prepare_once(policy, small_msgs)  # imports, tokenizer load
    small = min(prepare_once(policy, small_msgs)[0] for _ in range(3))
    large = min(prepare_once(policy, large_msgs)[0] for _ in range(3))
    assert large / small < SIZE * 1.6, f"{LARGE} messages: {large:.3f} s, {SMALL}: {small:.3f} s"


# --------------------------------------------------------------------------- layers


def rounds(n: int) -> list[Unit]:
    c = Conv().system("You are a coding agent.").user("Fix the failing test")
    for k in range(n):
        if k % 7 == 3:
            c.user(f"also check docs/page_{k}.md")
        c.step(("bash", {"cmd": f"ls -l src/pkg_{k}"}, f"module_{k}.py  {k % 9} KB\n" * 3))
    return c.user("go on").units()


def counted_work(layer: Layer, units: Sequence[Unit]) -> int:
    """Messages ``layer`` hands to ``ctx.count`` (each unit count included) in one apply,
    with a target only the newest rounds fit in."""
    work = 0

    def count(us: Sequence[Unit]) -> int:
        nonlocal work
        work += sum(len(u.messages) for u in us)
        return approx_count(us)

    total = approx_count(units)
    ctx = make_ctx(units, window=total, trigger=total // 2, target=total // 50, count=count)
    work = 0  # make_ctx counted the whole list once for ctx.used
    layer.apply(ctx, units)
    return work


LAYERS: dict[str, dict[str, Any]] = {
    "drop_rounds": {"keep_recent_rounds": 3, "min_keep_tokens": 0},
    "offload": {"keep_recent_rounds": 3},  # no store in this context: it drops
    "emergency": {"keep_recent_rounds": 40, "min_recent_rounds": 1, "max_result_chars": 20},
    "observation_mask": {"max_age_rounds": 3},
    "summarize": {"keep_recent_rounds": 3, "min_region_tokens": 0, "timeout_s": None},
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_each_builtin_layer_counts_linearly(name: str) -> None:
    cls = get_registry().get("layer", name)
    assert cls is not None
    layer: Callable[[], Layer] = lambda: cls(cls.Options.model_validate(LAYERS[name]))  # noqa: E731
    small_units, large_units = rounds(100), rounds(800)
    small, large = counted_work(layer(), small_units), counted_work(layer(), large_units)
    n_small = sum(len(u.messages) for u in small_units)
    n_large = sum(len(u.messages) for u in large_units)
    assert large <= 8 * n_large  # a few passes over the list, not one per round
    if small:
        assert large / small < (n_large / n_small) * 1.25, (small, large)


def test_a_conversation_larger_than_the_counter_cache_is_counted_once(tmp_path) -> None:
    """A counter whose tiers are smaller than the conversation (its default holds 16,384
    messages): one ``prepare`` still tokenizes each message once, and nothing is demoted
    to the digest tier and looked up there again (that made 100,000 messages
    superlinear)."""
    import ctxpolicy
    from ctxpolicy.state.memory import MemoryStateStore
    from ctxpolicy.tokens import TokenCounter

    policy = scaling_policy(str(tmp_path), agent=AGENT, window=WINDOW)
    msgs = tiny_session(2_000)
    counter = TokenCounter(policy.model, model_name=policy.model_name, hot_size=256)
    session = ctxpolicy.Session(policy, counter=counter, state_store=MemoryStateStore())
    session.prepare(msgs)
    st = counter.stats()
    assert st["misses"] <= len(msgs) + 10, st  # + the ledger and other messages of ours
    assert (st["digest_hits"], st["evictions"]) == (0, 0), st
    assert session.prepare(msgs) == session.prepare(list(msgs))
    assert counter.stats()["misses"] == st["misses"]  # the repeated calls counted nothing
