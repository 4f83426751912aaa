"""The plugin manager and registries (built-ins are plugins like any other)."""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

from ctxpolicy import plugins
from ctxpolicy.components import Layer, LayerResult, Preprocessor
from ctxpolicy.plugins import hookimpl
from tests.engine_helpers import plugin_module as _plugin
from tests.preprocessors.test_properties import NAMES as PREPROCESSORS  # all but redact


class _Layer(Layer):
    name = "test_plugins_layer"
    description = "a layer for tests"

    def apply(self, ctx, units):  # type: ignore[no-untyped-def]
        return LayerResult(list(units))


class _Pre(Preprocessor):
    name = "test_plugins_pre"

    def process(self, text, call):  # type: ignore[no-untyped-def]
        return text


@pytest.fixture
def fresh() -> Iterator[None]:
    plugins.reset()
    yield
    plugins.reset()


def test_builtins_come_through_the_hooks(fresh: None) -> None:
    reg = plugins.get_registry()
    builtin = {n for n, info in reg.plugins.items() if info.builtin}
    assert builtin == {m.removeprefix("ctxpolicy.") for m in plugins.DEFAULT_PLUGINS}
    for name in builtin:
        assert reg.plugins[name].distribution == "ctxpolicy"
    expected = {
        "layer": {"observation_mask", "drop_rounds", "summarize", "emergency", "offload"},
        "preprocessor": {*PREPROCESSORS, "redact"},
        "summarizer": {"extractive", "openai", "callable"},
        "tokenizer": {"tiktoken", "quicktok", "heuristic"},
        "snapshot_store": {"local", "fsspec"},
        "state_store": {"sqlite", "postgres", "memory"},
    }
    for kind, names in expected.items():
        for cname in names:
            assert reg.plugin_of(kind, cname) in builtin, (kind, cname)  # type: ignore[arg-type]
    assert reg.problems == []


def test_runtime_plugin_registers_components(fresh: None) -> None:
    plugins.register_plugin(_plugin("p1", _Layer), name="p1")
    reg = plugins.get_registry()
    assert reg.get("layer", "test_plugins_layer") is _Layer
    assert reg.plugin_of("layer", "test_plugins_layer") == "p1"
    assert reg.plugins["p1"].components == {"layer": ["test_plugins_layer"]}


def test_duplicate_names_are_a_problem_naming_both(fresh: None) -> None:
    class Other(_Layer):
        pass

    plugins.register_plugin(_plugin("p1", _Layer), name="p1")
    plugins.register_plugin(_plugin("p2", Other), name="p2")
    reg = plugins.get_registry()
    text = " ".join(str(p) for p in reg.problems)
    assert "'p1'" in text and "'p2'" in text and "test_plugins_layer" in text
    assert reg.get("layer", "test_plugins_layer") is _Layer  # the first one stays


def test_component_hooks_are_called_through_pluggy(fresh: None) -> None:
    """The registry calls the component hooks as events are called (``get_hookimpls``):
    a function pluggy does not know as an implementation (no ``@hookimpl``) provides
    nothing; ``tryfirst`` wins a name over an earlier plugin, ``trylast`` loses it to a
    later one; otherwise the first registration wins."""

    class Low(_Layer):
        pass

    class High(_Layer):
        pass

    def hook_of(name: str, cls: type, **opts: bool) -> types.ModuleType:
        mod = types.ModuleType(name)

        def hook(register):  # type: ignore[no-untyped-def]
            register(cls)

        mod.ctxpolicy_register_layers = hookimpl(**opts)(hook)  # type: ignore[attr-defined]
        return mod

    bare = types.ModuleType("bare")
    bare.ctxpolicy_register_layers = lambda register: register(_Layer)  # type: ignore[attr-defined]
    plugins.register_plugin(bare, name="bare")
    assert plugins.get_registry().get("layer", "test_plugins_layer") is None

    plugins.register_plugin(hook_of("low", Low, trylast=True), name="low")
    plugins.register_plugin(_plugin("p1", _Layer), name="p1")
    assert plugins.get_registry().plugin_of("layer", "test_plugins_layer") == "p1"

    plugins.register_plugin(hook_of("high", High, tryfirst=True), name="high")
    reg = plugins.get_registry()
    assert reg.plugin_of("layer", "test_plugins_layer") == "high"
    assert sum("test_plugins_layer" in str(p) for p in reg.problems) == 2


def test_wrong_kind_is_reported_not_raised(fresh: None) -> None:
    plugins.register_plugin(_plugin("bad", _Pre), name="bad")  # a preprocessor given as a layer
    reg = plugins.get_registry()
    assert any(
        p.plugin == "bad" and "not a subclass of ctxpolicy.Layer" in p.message for p in reg.problems
    )
    assert reg.get("layer", "test_plugins_pre") is None


def test_raising_hook_is_isolated(fresh: None) -> None:
    mod = types.ModuleType("boom")

    def hook(register):  # type: ignore[no-untyped-def]
        raise RuntimeError("kaboom")

    mod.ctxpolicy_register_layers = hookimpl(hook)  # type: ignore[attr-defined]
    plugins.register_plugin(mod, name="boom")
    plugins.register_plugin(_plugin("ok", _Layer), name="ok")
    reg = plugins.get_registry()
    assert any(p.plugin == "boom" and "kaboom" in p.message for p in reg.problems)
    assert reg.get("layer", "test_plugins_layer") is _Layer


def test_allowlist_empty_loads_no_third_party(fresh: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CTXPOLICY_PLUGINS", "")
    reg = plugins.get_registry()
    assert all(info.builtin for info in reg.plugins.values())


def test_observer_failure_is_contained(fresh: None) -> None:
    seen: list[dict] = []
    mod = types.ModuleType("obs")
    mod.ctxpolicy_event = hookimpl(lambda event: seen.append(event))  # type: ignore[attr-defined]
    bad = types.ModuleType("badobs")

    def explode(event):  # type: ignore[no-untyped-def]
        raise ValueError("no")

    bad.ctxpolicy_event = hookimpl(explode)  # type: ignore[attr-defined]
    plugins.register_plugin(mod, name="obs")
    plugins.register_plugin(bad, name="badobs")
    problems = plugins.emit_event({"type": "x"})
    assert seen == [{"type": "x"}]
    assert len(problems) == 1 and "badobs" in problems[0]


def test_create_is_the_one_way_to_build_a_component_by_name(tmp_path) -> None:
    """Look up → validate → instantiate, one error type (issue 26): the snapshot
    store, the state store, the preprocessors, layers and summarizers all go through
    ``Registry.create``; unknown names and invalid options are a ``ComponentError``
    (a LookupError and a ValueError) that names what failed."""
    from ctxpolicy.components import StateStoreError
    from ctxpolicy.engine.tool_results import ToolResultProcessor, open_store
    from ctxpolicy.plugins import ComponentError
    from ctxpolicy.snapshots import LocalStore
    from ctxpolicy.state import open_state_store
    from tests.engine_helpers import make_policy

    reg = plugins.get_registry()
    with pytest.raises(ComponentError, match=r"^unknown layer 'nope'; registered: .*drop_rounds"):
        reg.create("layer", "nope")
    with pytest.raises(LookupError):
        reg.create("summarizer", "nope")
    with pytest.raises(ValueError, match=r"^here: invalid options for preprocessor 'head_tail'"):
        reg.create("preprocessor", "head_tail", {"max_chars": "many"}, where="here")
    # if_known: only the fields the model has; init: the constructor's own arguments
    store = reg.create(
        "snapshot_store",
        "local",
        {},
        if_known={"max_age_days": 3, "not_a_field": 1},
        root=str(tmp_path / "s"),
    )
    assert isinstance(store, LocalStore) and store.options.max_age_days == 3

    policy = make_policy(tmp_path, snapshots={"store": "nope"})
    with pytest.raises(ComponentError, match="unknown snapshot store 'nope'"):
        open_store(policy, reg)
    policy = make_policy(tmp_path, state={"store": "nope"})
    with pytest.raises(StateStoreError, match="unknown state store 'nope'; registered: memory"):
        open_state_store(policy, reg)
    bad = make_policy(tools={"grep": {"preprocess": "head_tail", "options": {"max_chars": "x"}}})
    with pytest.raises(
        ComponentError, match=r"tools\.grep: invalid options for preprocessor 'head_tail'"
    ):
        ToolResultProcessor(bad, store=None, registry=reg)
