"""The shipped demo traces are exactly what the seeded generator writes."""

from __future__ import annotations

from pathlib import Path

from ctxpolicy.conversation import check_messages
from ctxpolicy.sim.synth import demo_traces, large_session, write_jsonl

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "traces"


def test_examples_are_regenerated_identically(tmp_path: Path) -> None:
    for name, messages in demo_traces():
        assert check_messages(messages) == []
        write_jsonl(tmp_path / name, messages)
        assert (tmp_path / name).read_bytes() == (EXAMPLES / name).read_bytes(), (
            f"examples/traces/{name} is stale: run `python -m ctxpolicy.sim.synth examples/traces`"
        )


def test_large_session_keeps_pairs_and_size() -> None:
    msgs = large_session(target_tokens=60_000)
    assert check_messages(msgs) == []
    assert sum(len(str(m.get("content") or "")) for m in msgs) >= 60_000 * 3.6
