"""Records of a segment file: encoding round trip, fallbacks, damage detected."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.snapshots import records
from ctxpolicy.snapshots.names import SnapshotError

NONCE = b"\x01\x02\x03\x04\x05\x06\x07\x08"
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


def _round(doc: dict) -> dict:
    magic, meta, body = records.encode(doc)
    return records.decode(records.record(NONCE, "step_001_x", magic, meta, body), "t")


@settings(max_examples=150, deadline=None)
@given(
    obs=st.text(alphabet=st.characters(codec=None), max_size=300),
    extra=st.dictionaries(st.text(max_size=8), _JSON, max_size=4),
)
def test_round_trip_exact(obs: str, extra: dict) -> None:
    doc = {"step": 3, "action": "x", "observation": obs, **extra}
    doc["observation"] = obs  # whatever extra held under that key
    back = _round(doc)
    assert back == doc and list(back) == list(doc)  # keys in their order
    magic, _, body = records.encode(doc)
    assert magic == records.MAGIC_BODY and body == obs.encode("utf-8", "surrogatepass")


def test_lone_surrogates_and_non_text_observations() -> None:
    doc = {"observation": "a\udcffb", "thought": "\ud800"}
    assert _round(doc) == doc
    assert _round({"observation": {"k": [1, 2]}}) == {"observation": {"k": [1, 2]}}
    assert _round({"observation": None}) == {"observation": None}


def test_what_json_cannot_hold_is_kept_as_text() -> None:
    cyc: list = []
    cyc.append(cyc)
    back = _round({"observation": "o", "action_input": cyc})
    assert back["observation"] == "o" and back["as_text"] == ["action_input"]
    assert _round({"observation": "o", "when": object})["when"] == str(object)


def test_parts_are_the_record() -> None:
    magic, meta, body = records.encode({"observation": "hello", "step": 1})
    bufs, total = records.parts(NONCE, "step_001_x", magic, meta, body)
    assert b"".join(bufs) == records.record(NONCE, "step_001_x", magic, meta, body)
    assert total == len(b"".join(bufs))


@pytest.mark.parametrize("cut", [1, 10, 30, -1, -5])
def test_torn_or_altered_records_are_refused(cut: int) -> None:
    data = records.record(NONCE, "step_001_x", *records.encode({"observation": "x" * 50}))
    with pytest.raises(SnapshotError):
        records.decode(data[:cut], "t")
    with pytest.raises(SnapshotError):
        records.decode(data[:-4] + b"XXXX", "t")
    seal = records.seal(NONCE)
    assert len(seal) == records.PREFIX.size + records.TRAILER.size
