"""Records of a segment file: encoding round trip, fallbacks, damage detected."""

from __future__ import annotations

import json

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


# --------------------------------------------------------------------------- fast path

_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None), max_size=30),
    _JSON,
)


def _c_meta(doc: dict) -> bytes:
    """What ``encode`` wrote before its tool-result fast path: the C encoder over the
    whole document, the observation as ``0``."""
    copy = dict(doc)
    copy["observation"] = 0
    return records._meta_json(copy).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(
    step=st.one_of(st.integers(), _VALUE),
    action=st.one_of(st.text(alphabet=st.characters(codec=None), max_size=20), _VALUE),
    fields=st.lists(st.one_of(st.none(), st.none(), _VALUE), min_size=4, max_size=4),
    given_input=st.one_of(st.text(alphabet=st.characters(codec=None), max_size=40), _VALUE),
    stamp=st.one_of(st.just("2026-12-06T02:30:00.123+00:00"), _VALUE),
    conv=st.one_of(st.text(alphabet=st.characters(codec=None), max_size=20), _VALUE),
    call_id=st.one_of(st.text(alphabet=st.characters(codec=None), max_size=20), _VALUE),
    obs=st.text(alphabet=st.characters(codec=None), max_size=50),
)
def test_tool_result_fast_path_writes_the_c_encoders_bytes(
    step, action, fields, given_input, stamp, conv, call_id, obs
) -> None:
    doc = {
        "step": step,
        "action": action,
        "phase": fields[0],
        "action_intention": fields[1],
        "action_reason": fields[2],
        "thought": fields[3],
        "action_input": given_input,
        "observation": obs,
        "timestamp": stamp,
        "conv_id": conv,
        "tool_call_id": call_id,
    }
    assert tuple(doc) == records.TOOL_RESULT_KEYS
    magic, meta, body = records.encode(doc)
    assert (magic, meta, body) == (
        records.MAGIC_BODY,
        _c_meta(doc),
        obs.encode("utf-8", "surrogatepass"),
    )
    assert json.dumps(_round(doc)) == json.dumps(doc)  # (NaN != NaN: compared as text)


def test_the_fast_path_takes_the_usual_document_and_leaves_the_others() -> None:
    doc = {
        "step": 12,
        "action": "bash",
        "phase": None,
        "action_intention": None,
        "action_reason": None,
        "thought": None,
        "action_input": '{"command": "ls \\"a\\"\\n"}',
        "observation": "out",
        "timestamp": "2026-12-06T02:30:00.123+00:00",
        "conv_id": "c/ü",
        "tool_call_id": "call_1",
    }
    assert records._tool_result_meta(doc) is not None
    assert records.encode(doc)[1] == _c_meta(doc)
    for change in (
        {"phase": "explore"},  # a caller's meta
        {"step": True},  # not an exact int
        {"tool_call_id": 7},
        {"action_input": {"path": "a.py", "n": [1, 2.5, None]}},  # nested: still fast
    ):
        other = {**doc, **change}
        assert records.encode(other)[1] == _c_meta(other)
    assert records._tool_result_meta({**doc, "phase": "x"}) is None
    reordered = {k: doc[k] for k in reversed(records.TOOL_RESULT_KEYS)}
    assert records._tool_result_meta(reordered) is None
    assert records.encode(reordered)[1] == _c_meta(reordered)
    extra = {**doc, "replaced_bytes": 3}  # render notes after the usual keys
    assert records._tool_result_meta(extra) is None
    assert records.encode(extra)[1] == _c_meta(extra)


def test_a_cyclic_action_input_still_takes_the_fallback() -> None:
    cyc: list = []
    cyc.append(cyc)
    doc = dict.fromkeys(records.TOOL_RESULT_KEYS)
    doc.update(step=1, action="a", action_input=cyc, observation="o", timestamp="t")
    doc.update(conv_id="c", tool_call_id="i")
    magic, _, body = records.encode(doc)
    assert magic == records.MAGIC_META and body == b""  # design A's writer, as before
    assert _round(doc)["observation"] == "o"


def test_record_ref_is_the_dataclass_one() -> None:
    from ctxpolicy.components import SnapshotRef
    from ctxpolicy.snapshots._common import record_ref

    fast = record_ref("ctxsnap://f/step_001_x", "f", "step_001_x")
    slow = SnapshotRef(uri="ctxsnap://f/step_001_x", path="", conv_id="f", name="step_001_x")
    assert type(fast) is SnapshotRef
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert vars(fast) == vars(slow)
    with pytest.raises(AttributeError):
        fast.name = "y"  # type: ignore[misc]  # still frozen
