"""``ctxpolicy.testing.conformance``: the suites fail for layers and preprocessors
that break the rules; ``layer_suite`` runs layers on conversations of other domains
than coding (tables, support chats, diffs) and on ``samples=`` of the author's own, and
``preprocessor_suite`` takes ``samples=`` too, so a bug that only tables trigger is
caught."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from ctxpolicy import (
    CompactionContext,
    ComponentOptions,
    Layer,
    LayerResult,
    Preprocessor,
    ToolCall,
    Unit,
)
from ctxpolicy.conversation import to_units
from ctxpolicy.testing import conformance

# ---------------------------------------------------------------------- rules broken


class SplitsUnits(Layer):
    name = "bad_split"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out = []
        for u in units:  # drop the tool results of every unpinned step: orphan calls
            if u.kind == "step" and u.tool_messages and not u.pinned:
                out.append(u.replace(messages=u.messages[:1]))
            else:
                out.append(u)
        return LayerResult(units=out)


class Mutates(Layer):
    name = "bad_mutate"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        for u in units:
            for m in u.tool_messages:
                m["content"] = "x"
        return LayerResult(units=list(units))


class Grows(Layer):
    name = "bad_grow"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        steps = [u for u in units if u.kind == "step" and not u.pinned]
        out = [
            u.replace(messages=[{**u.messages[0], "content": "padding " * 500}, *u.messages[1:]])
            if u in steps
            else u
            for u in units
        ]
        return LayerResult(units=out)


class DropsPinned(Layer):
    name = "bad_pinned"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        return LayerResult(units=[u for u in units if u.kind != "system"])


class Random(Layer):
    name = "bad_random"
    calls = 0

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        type(self).calls += 1
        steps = [i for i, u in enumerate(units) if u.kind == "step" and not u.pinned]
        drop = steps[type(self).calls % len(steps)] if steps else None
        return LayerResult(units=[u for i, u in enumerate(units) if i != drop])


class Raises(Layer):
    name = "bad_raise"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        if len(units) > 30:
            raise RuntimeError("too many units")
        return LayerResult(units=list(units))


class _KeepOpts(ComponentOptions):
    keep_recent_rounds: int = 2


class IgnoresKeepRecent(Layer):
    name = "bad_keep"
    Options = _KeepOpts

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        return LayerResult(units=[u for u in units if u.kind != "step" or u.pinned])


def run(suite: type, test: str) -> None:
    getattr(suite(), test)()


@pytest.mark.parametrize(
    ("layer", "test", "message"),
    [
        (SplitsUnits, "test_realistic_conversations", "invariants broken"),
        (Mutates, "test_realistic_conversations", "mutated"),
        (Grows, "test_realistic_conversations", "more tokens"),
        (DropsPinned, "test_realistic_conversations", "pinned"),
        (Random, "test_deterministic", "different output"),
        (IgnoresKeepRecent, "test_keep_recent_rounds", "was removed"),
    ],
)
def test_layer_suite_catches(layer: type[Layer], test: str, message: str) -> None:
    with pytest.raises(AssertionError, match=message):
        run(conformance.layer_suite(layer), test)


def test_layer_suite_catches_a_raising_layer() -> None:
    with pytest.raises(RuntimeError, match="too many units"):
        run(conformance.layer_suite(Raises), "test_huge_conversation")


def test_unknown_layer_name_is_a_clear_error() -> None:
    with pytest.raises(LookupError, match="no plugin provides layer 'nope'"):
        run(conformance.layer_suite("nope"), "test_is_a_layer")


class Longer(Preprocessor):
    name = "bad_longer"

    def process(self, text: str, call: ToolCall) -> str:
        return text + "!" * 500


class Fragile(Preprocessor):
    name = "bad_fragile"

    def process(self, text: str, call: ToolCall) -> str:
        return text.encode("ascii").decode()


@pytest.mark.parametrize(("pre", "exc"), [(Longer, AssertionError), (Fragile, UnicodeEncodeError)])
def test_preprocessor_suite_catches(pre: type[Preprocessor], exc: type[Exception]) -> None:
    with pytest.raises(exc):
        run(conformance.preprocessor_suite(pre), "test_fixed_inputs")


# ---------------------------------------------------------------------- samples


class _TableOptions(ComponentOptions):
    max_rows: int = 5


def _trim_tables(text: str, max_rows: int, marker: str) -> tuple[str, int]:
    lines = text.split("\n")
    rows = [i for i, line in enumerate(lines) if line.startswith("|")]
    if len(rows) <= max_rows + 2:  # header, separator, rows
        return text, 0
    keep = set(rows[: max_rows + 2])
    out = [line for i, line in enumerate(lines) if i not in rows or i in keep]
    out.append(marker.format(n=len(rows) - len(keep)))
    return "\n".join(out), 1


class TableTrim(Layer):
    """Keeps the first rows of every markdown table of a tool result."""

    name = "table_trim_test"
    Options = _TableOptions
    options: _TableOptions

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out, trimmed = [], 0
        for u in units:
            if u.kind != "step" or u.pinned:
                out.append(u)
                continue
            msgs = []
            for m in u.messages:
                if m.get("role") == "tool" and isinstance(m.get("content"), str):
                    text, n = _trim_tables(m["content"], self.options.max_rows, "[{n} rows cut]")
                    trimmed += n
                    m = {**m, "content": text}
                msgs.append(m)
            out.append(u.replace(messages=msgs))
        return LayerResult(units=out, report={"tables_trimmed": trimmed})


class TableBloat(TableTrim):
    """Wrong on tables only: its marker is longer than the rows it cuts."""

    name = "table_bloat_test"

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        out = []
        for u in units:
            msgs = []
            for m in u.messages:
                if m.get("role") == "tool" and str(m.get("content", "")).startswith("|"):
                    m = {**m, "content": m["content"] + "\n(table summary) " * 400}
                msgs.append(m)
            out.append(u.replace(messages=msgs))
        return LayerResult(units=out)


MY_TRACE: list[dict[str, Any]] = [
    {"role": "system", "content": "You answer questions about invoices."},
    {"role": "user", "content": "List unpaid invoices."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "q1", "type": "function", "function": {"name": "sql", "arguments": "{}"}}
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "q1",
        "content": "| id | due |\n|---|---|\n"
        + "\n".join(f"| INV-{i} | 2026-01-{i % 28 + 1:02d} |" for i in range(50)),
    },
    {"role": "user", "content": "Which is the oldest?"},
]

#: what a plugin author writes: the suite with a conversation of their own
TestTableTrimConformance = conformance.layer_suite(TableTrim, samples=[MY_TRACE])


def test_the_table_layer_is_exercised_on_tables() -> None:
    """The coding conversations have no table; the data conversation has several."""
    from ctxpolicy.testing.conversations import make_conversation

    coding, _ = to_units(make_conversation(12, seed=0))
    _, result = conformance.run_layer(TableTrim, None, coding, target_ratio=0.0)
    assert result.report["tables_trimmed"] == 0
    data, _ = to_units(conformance.domain_conversations()["data"])
    _, result = conformance.run_layer(TableTrim, None, data, target_ratio=0.0)
    assert result.report["tables_trimmed"] >= 5


def test_a_bug_only_tables_trigger_is_caught() -> None:
    suite = conformance.layer_suite(TableBloat)
    suite().test_realistic_conversations()  # coding conversations: nothing to see
    with pytest.raises(AssertionError, match=r"on the data conversation: .*more tokens"):
        suite().test_domain_conversations()


def test_samples_are_checked() -> None:
    suite = conformance.layer_suite(TableBloat, samples=[MY_TRACE])
    with pytest.raises(AssertionError, match=r"on the samples\[0\] conversation"):
        suite().test_samples()
    assert not hasattr(conformance.layer_suite(TableBloat)(), "test_samples")


class HatesSectionSigns(Preprocessor):
    name = "section_sign_test"

    def process(self, text: str, call: ToolCall) -> str:
        if "§" in text:
            raise ValueError("a section sign")
        return text


def test_preprocessor_samples_are_inputs_too() -> None:
    conformance.preprocessor_suite(HatesSectionSigns)().test_fixed_inputs()
    with pytest.raises(ValueError, match="a section sign"):
        conformance.preprocessor_suite(HatesSectionSigns, samples=["a§b"])().test_fixed_inputs()
