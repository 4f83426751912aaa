"""The conformance suite fails for layers and preprocessors that break the rules."""

from __future__ import annotations

from collections.abc import Sequence

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
from ctxpolicy.testing import conformance


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
