"""The shared LRU: bounded by its total weight, least recently used dropped first."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.conversation.lru import Lru


def test_counts_hits_and_drops_the_least_recently_used() -> None:
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # a is now the most recently used
    lru.put("c", 3)
    assert (len(lru), lru.get("b"), lru.get("a"), lru.get("c")) == (2, None, 1, 3)
    assert (lru.hits, lru.misses, lru.weight) == (3, 1, 2)
    lru.put("a", 9)  # a key kept already keeps its value
    assert lru.get("a") == 1
    lru.cache_clear()
    assert (len(lru), lru.weight, lru.hits, lru.misses) == (0, 0, 0, 0)


def test_a_zero_limit_keeps_nothing() -> None:
    lru: Lru[str, int] = Lru(0)
    lru.put("a", 1)
    assert len(lru) == 0 and lru.get("a") is None


_ops = st.lists(
    st.tuples(st.booleans(), st.sampled_from("abcdefgh"), st.text(max_size=12)), max_size=60
)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(0, 30), ops=_ops)
def test_equals_a_plain_model_and_keeps_its_bound(
    limit: int, ops: list[tuple[bool, str, str]]
) -> None:
    def weigh(key: str, value: str) -> int:
        return len(value) + 1

    lru: Lru[str, str] = Lru(limit, weigh)
    model: OrderedDict[str, str] = OrderedDict()
    for is_put, key, value in ops:
        if is_put:
            if key in model:
                model.move_to_end(key)
            else:
                model[key] = value
                while sum(weigh(k, v) for k, v in model.items()) > limit:
                    model.popitem(last=False)
            lru.put(key, value)
        else:
            assert lru.get(key) == model.get(key)
            if key in model:
                model.move_to_end(key)
        assert lru.weight == sum(weigh(k, v) for k, v in model.items()) <= limit
        assert len(lru) == len(model)
