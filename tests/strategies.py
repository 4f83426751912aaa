"""Hypothesis strategies shared by the tests: JSON-like values, text made of fragments."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

# every JSON scalar, NaN and the infinities included (json.dumps writes them)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),
)


def nested(
    leaf: st.SearchStrategy[Any],
    keys: st.SearchStrategy[Any],
    *,
    max_leaves: int,
    tuples: bool = False,
) -> st.SearchStrategy[Any]:
    """``leaf`` values nested in lists and dicts (keyed by ``keys``) of up to 4 items,
    and with ``tuples`` in pairs as tuples too."""

    def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        if tuples:
            return (
                st.lists(inner, max_size=4)
                | st.tuples(inner, inner)
                | st.dictionaries(keys, inner, max_size=4)
            )
        return st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4)

    return st.recursive(leaf, containers, max_leaves=max_leaves)


def joined(pieces: Sequence[str], max_size: int) -> st.SearchStrategy[str]:
    """Text made of up to ``max_size`` of ``pieces`` (fragments that the code under test
    reacts to), in any order."""
    return st.lists(st.sampled_from(pieces), max_size=max_size).map("".join)
