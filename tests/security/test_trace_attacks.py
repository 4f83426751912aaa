"""Issue 29 items 8 and 9: hostile traces in ``ctxpolicy simulate`` / ``tune``.

8. Importing a JSON-array trace recounted the newlines before every element
   (10k messages 0.68 s, 20k 2.86 s), and the replay recounted the whole raw
   conversation at every step (1,000 steps 1.6 s, 2,000 7.5 s). Both are linear
   now: the import is compared by CPU-time ratio, the replay by a deterministic
   count (messages handed to the token counter).
9. A trace nested deeper than the JSON parser recurses was a ``RecursionError``;
   now an ordinary error naming the file and the line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.cli import main as cli
from ctxpolicy.sim.importers import TraceError, load_trace, parse_trace_text
from ctxpolicy.sim.replay import replay_trace
from ctxpolicy.tokens.counter import TokenCounter
from tests.engine_helpers import make_policy
from tests.timing import assert_linear


def _trace(steps: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "task"},
    ]
    for i in range(steps):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        msgs.append({"role": "assistant", "content": f"step {i}", "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"out {i} " * 20})
    return msgs


def test_json_array_import_is_linear() -> None:
    small = json.dumps(_trace(1_000), indent=1)
    large = json.dumps(_trace(8_000), indent=1)
    assert len(parse_trace_text(large, name="t.json")) == 16_002
    # 8x the messages; quadratic was ~64
    assert_linear(
        lambda text: parse_trace_text(text, name="t.json"),
        small,
        large,
        floor=1e-4,
        what="a JSON-array trace",
    )


def test_replay_is_linear_in_trace_length(monkeypatch: pytest.MonkeyPatch) -> None:
    handed = [0]
    real = TokenCounter.count_messages

    def counting(self: TokenCounter, msgs: Any) -> int:
        handed[0] += len(msgs)
        return real(self, msgs)

    monkeypatch.setattr(TokenCounter, "count_messages", counting)
    policy = make_policy(None)

    def work(steps: int) -> int:
        handed[0] = 0
        replay_trace(_trace(steps), policy, trace=f"lin{steps}")
        return handed[0]

    small, large = work(100), work(400)
    assert large / small < 6, (small, large)  # 4x the steps; quadratic was ~16


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_deep_trace_is_an_ordinary_error(tmp_path: Path, suffix: str, depth: int) -> None:
    deep = "[" * depth + "]" * depth
    msg = '{"role": "user", "content": ' + deep + "}"
    body = (
        '{"role": "system", "content": "x"}\n' + msg + "\n"
        if suffix == ".jsonl"
        else '[\n{"role": "system", "content": "x"},\n' + msg + "\n]"
    )
    path = tmp_path / f"deep{suffix}"
    path.write_text(body)
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.file == str(path)
    assert info.value.line == (2 if suffix == ".jsonl" else 3)
    assert "nested too deeply" in str(info.value)
    res = CliRunner().invoke(cli, ["simulate", str(path), "--policy", "policies/agents.yaml"])
    assert res.exit_code == 2, res.output
    assert f"{path}:" in res.output and "Traceback" not in res.output
    assert "RecursionError" not in res.output


def test_deep_string_content_is_not_depth(tmp_path: Path) -> None:
    """Brackets inside strings do not count as nesting."""
    text = '[{"role": "user", "content": "' + "[" * 100_000 + '"}]'
    assert parse_trace_text(text, name="s.json")[0]["content"] == "[" * 100_000


_deep_shape = st.tuples(
    st.integers(600, 20_000), st.sampled_from(["[", '{"a":']), st.sampled_from([".json", ".jsonl"])
)


@settings(max_examples=15, deadline=None)
@given(_deep_shape, st.integers(0, 5))
def test_fuzz_deep_traces(shape: tuple[int, str, str], before: int) -> None:
    """Deep arrays or objects at any depth, after any number of ordinary lines: a
    ``TraceError`` at the deep message's line, never another exception."""
    depth, opener, suffix = shape
    closer = "]" if opener == "[" else "}"
    deep = opener * depth + "1" + closer * depth
    ok = ['{"role": "user", "content": "hi"}'] * before
    if suffix == ".jsonl":
        text, line = "\n".join([*ok, '{"role": "user", "content": ' + deep + "}"]), before + 1
    else:
        text = (
            "[\n" + "".join(m + ",\n" for m in ok) + '{"role": "user", "content": ' + deep + "}\n]"
        )
        line = before + 2
    try:
        parse_trace_text(text, name=f"f{suffix}")
    except TraceError as exc:
        assert exc.line == line, (exc.line, line)
