"""Conformance suites a plugin author binds to their component with one line::

    from ctxpolicy.testing import conformance

    TestKeepErrorsConformance = conformance.layer_suite("keep_errors")
    TestHtmlTextConformance = conformance.preprocessor_suite("html_text")

Each call returns a pytest test class (bind it to a module-level name starting
with ``Test`` so pytest collects it). The component is looked up in the plugin
registry when a test runs, so an installed plugin is tested exactly as the engine
sees it; pass the class itself (``layer_suite(KeepErrors)``) to test one that is
not registered, or call :func:`ensure_registered` with the plugin module first.

A layer must, on every conversation the suite generates (seeded realistic coding ones
from :func:`ctxpolicy.testing.conversations.make_conversation`, the other domains of
:func:`domain_conversations` — query results as tables, support chats with customer
records, code review diffs —, empty, huge, unicode, hypothesis-generated ones, and the
``samples=`` conversations of your own agents): return a :class:`~ctxpolicy.LayerResult` of units, keep
tool-call pairing, pinned units and order (:func:`ctxpolicy.conversation.check_units`),
not mutate its input, be deterministic, never return more tokens than it got, and —
when it has a ``keep_recent_rounds`` option — keep that many newest rounds.

The :class:`~ctxpolicy.CompactionContext` uses a real token counter
(:func:`ctxpolicy.tokens.get_counter`) and summarizers from the registry.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from ctxpolicy.components import (
    CompactionContext,
    ComponentOptions,
    Layer,
    LayerResult,
    Preprocessor,
    Summarizer,
    ToolCall,
)
from ctxpolicy.conversation import Unit, check_units, render, to_units
from ctxpolicy.conversation.messages import new_call
from ctxpolicy.testing.conversations import (
    UNICODE_SAMPLES,
    conversation_strategy,
    make_conversation,
)

__all__ = [
    "DEFAULT_WINDOW",
    "domain_conversations",
    "ensure_registered",
    "layer_suite",
    "make_context",
    "preprocessor_suite",
    "run_layer",
]

DEFAULT_WINDOW = 32_000
#: Seeds of the realistic conversations every layer is run on.
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)


# --------------------------------------------------------------------------- helpers


def ensure_registered(plugin: ModuleType | object, name: str | None = None) -> str | None:
    """Register ``plugin`` unless the components it provides are already registered.

    For tests of a plugin that may or may not be pip-installed (entry point found).
    Returns the plugin name used, or None when nothing had to be done.
    """
    from ctxpolicy import plugins

    provided: list[tuple[plugins.Kind, type]] = []
    for kind, hook in plugins.KIND_HOOKS.items():
        impl = getattr(plugin, hook, None)
        if impl is not None:
            staged: list[type] = []
            impl(register=staged.append)
            provided.extend((kind, cls) for cls in staged)
    reg = plugins.get_registry()
    if provided and all(reg.get(kind, getattr(cls, "name", "")) is cls for kind, cls in provided):
        return None
    pm = plugins.get_plugin_manager()
    if pm.is_registered(plugin):
        return None
    label = name or getattr(plugin, "__name__", None) or type(plugin).__name__
    return plugins.register_plugin(plugin, name=label)


def _resolve(kind: str, component: str | type) -> type[Any]:
    if isinstance(component, type):
        return component
    from ctxpolicy.plugins import get_registry

    reg = get_registry()
    cls = reg.get(kind, component)  # type: ignore[arg-type]
    if cls is None:
        known = ", ".join(reg.names(kind)) or "none"  # type: ignore[arg-type]
        problems = "; ".join(str(p) for p in reg.problems)
        raise LookupError(
            f"no plugin provides {kind} {component!r} (registered: {known})"
            + (f"; plugin problems: {problems}" if problems else "")
            + ". Install the plugin (pip install -e .) or call conformance.ensure_registered(module)."
        )
    return cls


def _counter(window: int) -> Any:
    from ctxpolicy.policy.models import ModelSpec
    from ctxpolicy.tokens import get_counter

    return get_counter(ModelSpec(context_window=window))


def _summarizer(name: str, options: Mapping[str, Any]) -> Summarizer:
    from ctxpolicy.plugins import get_registry

    inst = get_registry().create("summarizer", name, options)
    assert isinstance(inst, Summarizer)
    return inst


class EventLog(list[dict[str, Any]]):
    """Collects ``ctx.emit(type, **fields)`` calls as dicts."""

    def __call__(self, type_: str, **fields: Any) -> None:
        self.append({"type": type_, **fields})


def make_context(
    units: Sequence[Unit],
    *,
    window: int = DEFAULT_WINDOW,
    target_ratio: float = 0.5,
    memory: dict[str, Any] | None = None,
    snapshots: Any = None,
    ledger: Any = None,
    constraints: Sequence[str] = (),
) -> CompactionContext:
    """A :class:`CompactionContext` over ``units`` with a real counter.

    ``trigger`` is 90 % of what the units count (so the layer is asked to work)
    and ``target`` is ``target_ratio`` of the trigger.
    """
    from ctxpolicy.policy.scalars import State

    counter = _counter(window)

    def count(us: Sequence[Unit]) -> int:
        return int(counter.count_messages(render(us)))

    used = count(units)
    trigger = max(1, int(used * 0.9))
    return CompactionContext(
        count=count,
        used=used,
        window=max(window, used),
        trigger=trigger,
        target=int(trigger * target_ratio),
        state=State.error,
        conv_id="conformance",
        summarizer=_summarizer,
        emit=EventLog(),
        memory={} if memory is None else memory,
        snapshots=snapshots,
        ledger=ledger,
        constraints=tuple(constraints),
        count_text=counter.count_text,
    )


def _units(messages: Sequence[Mapping[str, Any]]) -> list[Unit]:
    units, _ = to_units(messages)
    return units


def run_layer(
    cls: type[Any],
    options: Mapping[str, Any] | None,
    units: Sequence[Unit],
    **ctx_kw: Any,
) -> tuple[CompactionContext, LayerResult]:
    """Instantiate a layer with ``options`` and apply it once (fresh context)."""
    layer = cls(cls.Options.model_validate(dict(options or {})))
    ctx = make_context(units, **ctx_kw)
    result = layer.apply(ctx, tuple(units))
    return ctx, result


def _fingerprint(units: Sequence[Unit]) -> list[tuple[str, str, tuple[str, ...], bool, Any]]:
    return [(u.key, u.kind, u.origin, u.pinned, render([u])) for u in units]


def _check_result(
    cls: type[Any],
    options: Mapping[str, Any] | None,
    messages: Sequence[Mapping[str, Any]],
    **ctx_kw: Any,
) -> LayerResult:
    """Apply once and assert every invariant that holds for any input."""
    frozen = copy.deepcopy(list(messages))
    units = _units(messages)
    units_before = copy.deepcopy(units)
    ctx, result = run_layer(cls, options, units, **ctx_kw)
    assert isinstance(result, LayerResult), (
        f"apply() returned {type(result).__name__}, not LayerResult"
    )
    out = list(result.units)
    assert all(isinstance(u, Unit) for u in out), "apply() returned something that is not a Unit"
    assert all(isinstance(u, Unit) for u in result.dropped), "LayerResult.dropped holds non-units"
    violations = check_units(units, out)
    assert not violations, "invariants broken: " + "; ".join(v.detail for v in violations)
    assert list(messages) == frozen, "the layer mutated the input messages"
    assert units == units_before, "the layer mutated the input units"
    assert render(units) == render(units_before), "the layer mutated messages inside units"
    before, after = ctx.count(units), ctx.count(out)
    assert after <= before, f"the layer returned more tokens ({after}) than it received ({before})"
    return result


def _check_deterministic(
    cls: type[Any], options: Mapping[str, Any] | None, messages: Sequence[Mapping[str, Any]]
) -> None:
    units = _units(messages)
    _, a = run_layer(cls, options, units)
    _, b = run_layer(cls, options, _units(copy.deepcopy(list(messages))))
    assert _fingerprint(a.units) == _fingerprint(b.units), (
        "same input and options gave different output"
    )


def _check_keeps_recent(
    cls: type[Any], opts: Mapping[str, Any], msgs: Sequence[Mapping[str, Any]]
) -> None:
    """With ``keep_recent_rounds: k`` and a target of nothing, the k newest rounds stay."""
    steps = [u for u in _units(msgs) if u.kind == "step"]
    for k in (0, 1, 2, 3, 5):
        result = _check_result(cls, {**opts, "keep_recent_rounds": k}, msgs, target_ratio=0.0)
        out_keys = [u.key for u in result.units]
        for u in steps[len(steps) - k :] if k else []:
            assert u.key in out_keys, (
                f"keep_recent_rounds={k}: round {u.round} (one of the {k} newest) was removed"
            )


def _settings() -> Any:
    from hypothesis import HealthCheck, settings

    return settings(
        deadline=None,
        max_examples=25,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
        ],
        derandomize=True,
    )


def _hypothesis_available() -> bool:
    try:
        import hypothesis  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return True


# --------------------------------------------------------------------------- domains


def _exchange(n: int, name: str, arguments: dict[str, Any], output: str) -> list[dict[str, Any]]:
    """One assistant tool call and its result."""
    import json

    call_id = f"{name}_{n}"
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [new_call(call_id, name, json.dumps(arguments))],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def _table(rows: int, seed: int, sep: str = "|") -> str:
    cols = ["order_id", "customer", "region", "amount_usd", "status", "created_at"]
    regions = ("EMEA", "APAC", "AMER", "北京", "São Paulo")
    statuses = ("paid", "refunded", "pending", "failed")
    lines = [sep.join(cols)]
    if sep == "|":
        lines = [f"| {' | '.join(cols)} |", "|" + "---|" * len(cols)]
    for i in range(rows):
        k = (i * 7919 + seed * 104729) % 100_000
        cells = [
            f"ORD-{k:05d}",
            f"cust-{k % 997}",
            regions[k % len(regions)],
            f"{(k % 50_000) / 100:.2f}",
            statuses[k % len(statuses)],
            f"2026-{1 + k % 12:02d}-{1 + k % 28:02d}",
        ]
        lines.append(f"| {' | '.join(cells)} |" if sep == "|" else sep.join(cells))
    return "\n".join(lines)


def domain_conversations() -> dict[str, list[dict[str, Any]]]:
    """Conversations of agents other than coding ones, deterministic: ``data`` (SQL
    results as markdown and CSV tables, one of 2,000 rows, JSON), ``support`` (many
    short customer turns, records with e-mail addresses and phone numbers) and
    ``review`` (diffs and whole files). Every layer of :func:`layer_suite` runs on
    them; they are also a starting point for ``samples=`` of your own."""
    data: list[dict[str, Any]] = [
        {"role": "system", "content": "You analyse sales data with SQL. Cite order ids."},
        {"role": "user", "content": "Which regions lost the most revenue to refunds in Q3?"},
    ]
    for i in range(8):
        if i % 3 == 2:
            out = _table(40 + 10 * i, i, sep=",")
            data += _exchange(i, "run_sql_csv", {"query": f"SELECT * FROM refunds_{i}"}, out)
        elif i == 4:
            out = _table(2000, i)
            data += _exchange(i, "query_database", {"query": "SELECT * FROM orders"}, out)
        else:
            out = _table(15 + 5 * i, i)
            data += _exchange(i, "query_database", {"query": f"SELECT ... LIMIT {i}"}, out)
        if i == 3:
            data.append({"role": "user", "content": "Only EMEA and APAC, please."})
    data += _exchange(
        9,
        "export_json",
        {"table": "summary"},
        '{"rows": ['
        + ", ".join(f'{{"region": "R{i}", "lost": {i * 17.5}}}' for i in range(300))
        + "]}",
    )
    data.append({"role": "user", "content": "Summarise it in three bullet points."})

    support: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a support agent. Never reveal a full card number."},
        {"role": "user", "content": "My order ORD-01234 never arrived."},
    ]
    for i in range(14):
        record = (
            f"customer: cust-{i}\nemail: jane.doe{i}@example.com\nphone: +1-555-01{i:02d}\n"
            f"orders: ORD-{1234 + i:05d} (shipped), ORD-{2000 + i:05d} (pending)\n"
            + "note: called twice about delivery\n"
            * (1 + i % 4)
        )
        support += _exchange(i, "lookup_customer", {"id": f"cust-{i}"}, record)
        support.append({"role": "assistant", "content": f"I found the order; step {i} done."})
        support.append({"role": "user", "content": f"Thanks. And what about the refund? ({i})"})

    review: list[dict[str, Any]] = [
        {"role": "system", "content": "You review pull requests. Quote file:line."},
        {"role": "user", "content": "Review PR #88: it changes the budget arithmetic."},
    ]
    for i in range(6):
        diff = "\n".join(
            [f"diff --git a/pkg/m{i}.py b/pkg/m{i}.py", "@@ -1,40 +1,42 @@"]
            + [f"{'+-'[j % 2]}    value_{j} = compute({j}, limit={i})" for j in range(60 + 40 * i)]
        )
        review += _exchange(i, "git_diff", {"path": f"pkg/m{i}.py"}, diff)
        source = "\n".join(f"def f{j}(x):\n    return x * {j}" for j in range(150))
        review += _exchange(10 + i, "read_file", {"path": f"pkg/m{i}.py"}, source)
    review.append({"role": "user", "content": "Any blocking issue?"})
    return {"data": data, "support": support, "review": review}


# --------------------------------------------------------------------------- layers


def layer_suite(
    layer: str | type[Layer],
    options: Mapping[str, Any] | None = None,
    *,
    samples: Sequence[Sequence[Mapping[str, Any]]] = (),
) -> type:
    """A pytest class checking the conformance of a layer (by name or class).

    ``options`` are the layer options the suite uses (defaults when None); the
    ``keep_recent_rounds`` check overrides that option when the layer has it.
    ``samples`` are conversations of your own agents' domain (OpenAI chat message
    lists, such as recorded traces): each is checked like the generated ones, at a
    tight, a middle and a loose target, for determinism and for the newest rounds a
    ``keep_recent_rounds`` option promises (``test_samples``).
    """
    label = layer if isinstance(layer, str) else getattr(layer, "name", layer.__name__)
    opts = dict(options or {})
    own = [list(s) for s in samples]

    def cls_() -> type[Any]:
        return _resolve("layer", layer)

    def test_is_a_layer(self: Any) -> None:
        cls = cls_()
        assert issubclass(cls, Layer), f"{cls!r} is not a ctxpolicy.Layer subclass"
        assert isinstance(cls.name, str) and cls.name, "a layer needs a non-empty `name`"
        assert issubclass(cls.Options, ComponentOptions), (
            "Options must subclass ctxpolicy.ComponentOptions"
        )
        cls.Options()  # every option has a default
        cls.Options.model_validate(opts)
        schema = cls.Options.model_json_schema()
        assert schema.get("type") == "object"

    def test_unknown_option_rejected(self: Any) -> None:
        import pydantic
        import pytest

        cls = cls_()
        with pytest.raises(pydantic.ValidationError):
            cls.Options.model_validate({**opts, "no_such_option_xyz": 1})

    def test_realistic_conversations(self: Any) -> None:
        cls = cls_()
        for seed in SEEDS:
            _check_result(cls, opts, make_conversation(12, seed=seed))

    def test_deterministic(self: Any) -> None:
        cls = cls_()
        for seed in SEEDS[:3]:
            _check_deterministic(cls, opts, make_conversation(10, seed=seed))

    def test_empty_conversation(self: Any) -> None:
        cls = cls_()
        result = _check_result(cls, opts, [])
        assert list(result.units) == []
        _check_result(cls, opts, [{"role": "system", "content": "You are terse."}])
        _check_result(cls, opts, [{"role": "user", "content": "hi"}])
        _check_result(cls, opts, make_conversation(0, seed=1))

    def test_huge_conversation(self: Any) -> None:
        cls = cls_()
        msgs = make_conversation(60, seed=7, big_outputs=0.5)
        huge = "line of output\n" * 15_000
        msgs.insert(
            4,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [new_call("huge_1", "read_file", "{}")],
            },
        )
        msgs.insert(5, {"role": "tool", "tool_call_id": "huge_1", "content": huge})
        _check_result(cls, opts, msgs, window=128_000)

    def test_unicode_conversation(self: Any) -> None:
        cls = cls_()
        msgs = make_conversation(10, seed=3, unicode=True)
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                m["content"] = UNICODE_SAMPLES[i % len(UNICODE_SAMPLES)] * 40
        _check_result(cls, opts, msgs)

    def test_parallel_calls_stay_paired(self: Any) -> None:
        cls = cls_()
        _check_result(cls, opts, make_conversation(15, seed=11, parallel=1.0))

    def test_tight_and_loose_targets(self: Any) -> None:
        cls = cls_()
        msgs = make_conversation(12, seed=5)
        for ratio in (0.0, 0.1, 1.0, 2.0):
            _check_result(cls, opts, msgs, target_ratio=ratio)

    def test_keep_recent_rounds(self: Any) -> None:
        import pytest

        cls = cls_()
        if "keep_recent_rounds" not in cls.Options.model_fields:
            pytest.skip(f"layer {cls.name!r} has no keep_recent_rounds option")
        _check_keeps_recent(cls, opts, make_conversation(12, seed=2, big_outputs=0.4))

    def _check_domain(cls: type[Any], name: str, msgs: Sequence[Mapping[str, Any]]) -> None:
        try:
            for ratio in (0.0, 0.5, 1.0):
                _check_result(cls, opts, msgs, target_ratio=ratio)
            _check_deterministic(cls, opts, msgs)
            if "keep_recent_rounds" in cls.Options.model_fields:
                _check_keeps_recent(cls, opts, msgs)
        except AssertionError as exc:
            raise AssertionError(f"on the {name} conversation: {exc}") from exc

    def test_domain_conversations(self: Any) -> None:
        cls = cls_()
        for name, msgs in domain_conversations().items():
            _check_domain(cls, name, msgs)

    def test_samples(self: Any) -> None:
        cls = cls_()
        for i, msgs in enumerate(own):
            _check_domain(cls, f"samples[{i}]", msgs)

    ns: dict[str, Any] = {
        "__doc__": f"ctxpolicy conformance suite for layer {label!r}.",
        "__test__": True,
        "test_is_a_layer": test_is_a_layer,
        "test_unknown_option_rejected": test_unknown_option_rejected,
        "test_realistic_conversations": test_realistic_conversations,
        "test_deterministic": test_deterministic,
        "test_empty_conversation": test_empty_conversation,
        "test_huge_conversation": test_huge_conversation,
        "test_unicode_conversation": test_unicode_conversation,
        "test_parallel_calls_stay_paired": test_parallel_calls_stay_paired,
        "test_tight_and_loose_targets": test_tight_and_loose_targets,
        "test_keep_recent_rounds": test_keep_recent_rounds,
        "test_domain_conversations": test_domain_conversations,
    }
    if own:
        ns["test_samples"] = test_samples
    if _hypothesis_available():
        from hypothesis import given

        @_settings()
        @given(msgs=conversation_strategy())
        def test_never_raises_on_generated_conversations(
            self: Any, msgs: list[dict[str, Any]]
        ) -> None:
            _check_result(cls_(), opts, msgs)

        ns["test_never_raises_on_generated_conversations"] = (
            test_never_raises_on_generated_conversations
        )
    return type(f"LayerConformance_{label}", (), ns)


# --------------------------------------------------------------------------- preprocessors


def preprocessor_suite(
    preprocessor: str | type[Preprocessor],
    options: Mapping[str, Any] | None = None,
    *,
    max_growth: int = 200,
    samples: Sequence[str] = (),
) -> type:
    """A pytest class checking the conformance of a preprocessor (by name or class).

    The output must be a string no longer than the input plus ``max_growth``
    characters (room for a marker such as ``[… 1200 chars elided …]``), be the same
    for the same input, and never raise. ``samples`` adds inputs of your own.
    """
    label = (
        preprocessor
        if isinstance(preprocessor, str)
        else getattr(preprocessor, "name", preprocessor.__name__)
    )
    opts = dict(options or {})
    fixed: tuple[str, ...] = (
        "",
        " ",
        "\n\n\n",
        "plain text output\n" * 3,
        "x" * 50_000,
        "line\n" * 20_000,
        *UNICODE_SAMPLES,
        "<html><body><p>Hello &amp; welcome</p><script>alert(1)</script></body></html>",
        '{"rows": [1, 2, 3], "next": null}',
        "Traceback (most recent call last):\nValueError: boom",
        "\x00\x01\x7f binary-ish \ufffd",
        *samples,
    )
    calls = (ToolCall(name="tool"), ToolCall(name="read_file", arguments={"path": "a.py"}, id="c1"))

    def make() -> Preprocessor:
        cls = _resolve("preprocessor", preprocessor)
        inst = cls(cls.Options.model_validate(opts))
        assert isinstance(inst, Preprocessor)
        return inst

    def check(pre: Preprocessor, text: str, call: ToolCall) -> str:
        out = pre.process(text, call)
        assert isinstance(out, str), f"process() returned {type(out).__name__}, not str"
        assert len(out) <= len(text) + max_growth, (
            f"output ({len(out)} chars) longer than input ({len(text)}) + {max_growth}"
        )
        assert pre.process(text, call) == out, "same input gave different output"
        return out

    def test_is_a_preprocessor(self: Any) -> None:
        cls = _resolve("preprocessor", preprocessor)
        assert issubclass(cls, Preprocessor)
        assert isinstance(cls.name, str) and cls.name
        assert issubclass(cls.Options, ComponentOptions)
        cls.Options()
        assert cls.Options.model_json_schema().get("type") == "object"

    def test_unknown_option_rejected(self: Any) -> None:
        import pydantic
        import pytest

        cls = _resolve("preprocessor", preprocessor)
        with pytest.raises(pydantic.ValidationError):
            cls.Options.model_validate({**opts, "no_such_option_xyz": 1})

    def test_fixed_inputs(self: Any) -> None:
        pre = make()
        for text in fixed:
            for call in calls:
                check(pre, text, call)

    def test_deterministic_across_instances(self: Any) -> None:
        a, b = make(), make()
        for text in fixed:
            assert a.process(text, calls[0]) == b.process(text, calls[0])

    ns: dict[str, Any] = {
        "__doc__": f"ctxpolicy conformance suite for preprocessor {label!r}.",
        "__test__": True,
        "test_is_a_preprocessor": test_is_a_preprocessor,
        "test_unknown_option_rejected": test_unknown_option_rejected,
        "test_fixed_inputs": test_fixed_inputs,
        "test_deterministic_across_instances": test_deterministic_across_instances,
    }
    if _hypothesis_available():
        from hypothesis import given
        from hypothesis import strategies as st

        @_settings()
        @given(
            text=st.one_of(
                st.text(max_size=3000),
                st.lists(
                    st.sampled_from(
                        [
                            "<p>",
                            "</p>",
                            "<a href='x'>",
                            "</a>",
                            "<br>",
                            "&amp;",
                            "&#x1F600;",
                            "<script>",
                            "</script>",
                            "<",
                            ">",
                            "&",
                            "ERROR",
                            "\n",
                            " ",
                            "文字",
                            "<!--",
                            "-->",
                            "<![CDATA[",
                            "]]>",
                        ]
                    ),
                    max_size=200,
                ).map("".join),
            )
        )
        def test_never_raises_on_random_text(self: Any, text: str) -> None:
            check(make(), text, calls[0])

        ns["test_never_raises_on_random_text"] = test_never_raises_on_random_text
    return type(f"PreprocessorConformance_{label}", (), ns)
