"""Plugin manager and component registries.

One :func:`get_plugin_manager` builds the pluggy manager: hookspecs, built-in
plugin modules (:data:`DEFAULT_PLUGINS`), then third-party entry points of group
``ctxpolicy`` (limited by ``CTXPOLICY_PLUGINS``). :func:`get_registry` calls the
``ctxpolicy_register_*`` hooks once and keeps the result.

A plugin that fails to import or to register is recorded as a
:class:`PluginProblem` naming the plugin and its distribution; the rest keep
working. Two components of one kind with the same name are a problem naming both.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any, Literal

import pluggy

from ctxpolicy import hookspecs
from ctxpolicy.components import (
    Component,
    Layer,
    Preprocessor,
    SnapshotStore,
    StateStore,
    Summarizer,
    Tokenizer,
)

hookimpl = pluggy.HookimplMarker("ctxpolicy")

ENTRY_POINT_GROUP = "ctxpolicy"
ENV_ALLOWLIST = "CTXPOLICY_PLUGINS"

#: Built-in plugin modules, registered exactly like third-party ones.
DEFAULT_PLUGINS: tuple[str, ...] = (
    "ctxpolicy.layers.observation_mask",
    "ctxpolicy.layers.drop_rounds",
    "ctxpolicy.layers.summarize",
    "ctxpolicy.layers.emergency",
    "ctxpolicy.layers.offload",
    "ctxpolicy.preprocessors.head_tail",
    "ctxpolicy.preprocessors.head_tail_lines",
    "ctxpolicy.preprocessors.test_failures",
    "ctxpolicy.preprocessors.log_levels",
    "ctxpolicy.preprocessors.command_output",
    "ctxpolicy.preprocessors.table_rows",
    "ctxpolicy.preprocessors.json_prune",
    "ctxpolicy.preprocessors.redact",
    "ctxpolicy.summarizers.extractive",
    "ctxpolicy.summarizers.openai",
    "ctxpolicy.summarizers.callable",
    "ctxpolicy.tokens",
    "ctxpolicy.snapshots",
    "ctxpolicy.state.memory",
    "ctxpolicy.state.sqlite",
    "ctxpolicy.state.postgres",
)

Kind = Literal["layer", "preprocessor", "summarizer", "tokenizer", "snapshot_store", "state_store"]
KIND_BASES: dict[Kind, type[Component]] = {
    "layer": Layer,
    "preprocessor": Preprocessor,
    "summarizer": Summarizer,
    "tokenizer": Tokenizer,
    "snapshot_store": SnapshotStore,
    "state_store": StateStore,
}
KIND_HOOKS: dict[Kind, str] = {
    "layer": "ctxpolicy_register_layers",
    "preprocessor": "ctxpolicy_register_preprocessors",
    "summarizer": "ctxpolicy_register_summarizers",
    "tokenizer": "ctxpolicy_register_tokenizers",
    "snapshot_store": "ctxpolicy_register_snapshot_stores",
    "state_store": "ctxpolicy_register_state_stores",
}


@dataclass
class PluginInfo:
    """A loaded plugin: its name, where it came from, and what it provides."""

    name: str
    module: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False
    components: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class PluginProblem:
    """A plugin that could not be loaded or registered, or a name clash."""

    plugin: str
    distribution: str | None
    message: str

    def __str__(self) -> str:
        dist = f" (distribution {self.distribution})" if self.distribution else ""
        return f"plugin {self.plugin!r}{dist}: {self.message}"


class DuplicateComponentError(ValueError):
    """Two plugins registered a component of the same kind under one name."""


class ComponentError(LookupError, ValueError):
    """A component :meth:`Registry.create` cannot build: no plugin provides it, or its
    options do not fit its ``Options`` model (the cause is chained). A ``LookupError``
    and a ``ValueError``, so callers written for either still catch it."""


@dataclass
class Registry:
    """Components by kind and name, with the plugin that provided each."""

    components: dict[Kind, dict[str, type[Component]]] = field(
        default_factory=lambda: {k: {} for k in KIND_BASES}
    )
    provider: dict[tuple[Kind, str], str] = field(default_factory=dict)
    plugins: dict[str, PluginInfo] = field(default_factory=dict)
    problems: list[PluginProblem] = field(default_factory=list)

    def get(self, kind: Kind, name: str) -> type[Component] | None:
        return self.components[kind].get(name)

    def create(
        self,
        kind: Kind,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        where: str = "",
        if_known: Mapping[str, Any] | None = None,
        **init: Any,
    ) -> Component:
        """An instance of component ``name`` of ``kind``: look it up, validate
        ``options`` with its own ``Options`` model, instantiate with ``**init`` (a
        store's ``root``/``home``): the one way every component is built by name.

        ``if_known`` adds options only where the component's model has the field (the
        policy's retention settings for a snapshot store). :class:`ComponentError`
        (prefixed with ``where``) when no plugin provides it or the options are invalid.
        """
        cls = self.get(kind, name)
        label = kind.replace("_", " ")
        prefix = f"{where}: " if where else ""
        if cls is None:
            raise ComponentError(
                f"{prefix}unknown {label} {name!r}; registered: "
                + (", ".join(self.names(kind)) or "none")
            )
        raw = dict(options or {})
        if if_known:
            fields = cls.Options.model_fields
            raw.update((k, v) for k, v in if_known.items() if k in fields)
        try:
            validated = cls.Options.model_validate(raw)
        except ValueError as exc:  # pydantic's ValidationError
            raise ComponentError(f"{prefix}invalid options for {label} {name!r}: {exc}") from exc
        return cls(validated, **init)

    def names(self, kind: Kind) -> list[str]:
        return sorted(self.components[kind])

    @property
    def summarizers(self) -> dict[str, type[Component]]:
        return self.components["summarizer"]

    @property
    def tokenizers(self) -> dict[str, type[Component]]:
        return self.components["tokenizer"]

    def plugin_of(self, kind: Kind, name: str) -> str | None:
        return self.provider.get((kind, name))

    def add(self, kind: Kind, cls: type[Component], plugin: str) -> None:
        base = KIND_BASES[kind]
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"{cls!r} is not a subclass of ctxpolicy.{base.__name__}")
        name = getattr(cls, "name", "")
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls.__name__} has no `name`")
        existing = self.provider.get((kind, name))
        if existing is not None and self.components[kind][name] is not cls:
            raise DuplicateComponentError(
                f"{kind} {name!r} is registered by both plugin {existing!r} and plugin {plugin!r}"
            )
        self.components[kind][name] = cls
        self.provider[(kind, name)] = plugin
        self.plugins[plugin].components.setdefault(kind, []).append(name)


def _allowlist() -> set[str] | None:
    raw = os.environ.get(ENV_ALLOWLIST)
    if raw is None:
        return None
    return {p.strip() for p in raw.split(",") if p.strip()}


def _entry_points() -> Iterator[metadata.EntryPoint]:
    yield from metadata.entry_points(group=ENTRY_POINT_GROUP)


_lock = threading.RLock()
_manager: pluggy.PluginManager | None = None
_registry: Registry | None = None
_infos: dict[str, PluginInfo] = {}
_problems: list[PluginProblem] = []


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide plugin manager (built once)."""
    global _manager
    built = _manager  # once built it is only replaced under the lock: read it without
    if built is not None:
        return built
    with _lock:
        if _manager is not None:
            return _manager
        pm = pluggy.PluginManager("ctxpolicy")
        pm.add_hookspecs(hookspecs)
        _infos.clear()
        _problems.clear()
        own_version: str | None = None
        for modname in DEFAULT_PLUGINS:
            try:
                mod = importlib.import_module(modname)
            except ModuleNotFoundError as exc:
                if exc.name == modname:  # built-in not written yet in this build
                    continue
                _problems.append(PluginProblem(modname, "ctxpolicy", f"failed to import: {exc}"))
                continue
            except Exception as exc:  # pragma: no cover - a broken built-in
                _problems.append(PluginProblem(modname, "ctxpolicy", f"failed to import: {exc!r}"))
                continue
            short = modname.removeprefix("ctxpolicy.")
            pm.register(mod, name=short)
            if own_version is None:  # read once: each metadata lookup parses METADATA
                own_version = _version("ctxpolicy")
            _infos[short] = PluginInfo(short, modname, "ctxpolicy", own_version, builtin=True)
        allow = _allowlist()
        for ep in _entry_points():
            if allow is not None and ep.name not in allow:
                continue
            dist = ep.dist.name if ep.dist is not None else None
            if ep.name in _infos or pm.has_plugin(ep.name):
                _problems.append(
                    PluginProblem(ep.name, dist, "a plugin of this name is already loaded")
                )
                continue
            try:
                obj = ep.load()
            except Exception as exc:
                _problems.append(
                    PluginProblem(ep.name, dist, f"failed to import {ep.value}: {exc!r}")
                )
                continue
            try:
                pm.register(obj, name=ep.name)
            except Exception as exc:
                _problems.append(PluginProblem(ep.name, dist, f"failed to register: {exc!r}"))
                continue
            modname = obj.__name__ if isinstance(obj, ModuleType) else ep.value
            _infos[ep.name] = PluginInfo(
                ep.name, modname, dist, ep.dist.version if ep.dist is not None else None
            )
        _manager = pm
        return pm


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:  # pragma: no cover
        return None


def get_registry() -> Registry:
    """Components of every loaded plugin (hooks called once, then cached)."""
    global _registry
    with _lock:
        if _registry is not None:
            return _registry
        pm = get_plugin_manager()
        reg = Registry()
        reg.problems.extend(_problems)
        for name, info in _infos.items():
            reg.plugins[name] = PluginInfo(
                info.name, info.module, info.distribution, info.version, info.builtin
            )
        for plugin_name, plugin in list(pm.list_name_plugin()):
            if plugin_name not in reg.plugins:  # registered by hand (tests, apps)
                mod = getattr(plugin, "__name__", repr(plugin))
                reg.plugins[plugin_name] = PluginInfo(plugin_name, mod)
        for kind, hook_name in KIND_HOOKS.items():
            for impl in _in_order(getattr(pm.hook, hook_name).get_hookimpls()):
                _call_one(reg, kind, impl.plugin_name, impl.function)
        _registry = reg
        return reg


def _in_order(impls: list[pluggy.HookImpl]) -> list[pluggy.HookImpl]:
    """Component hooks go through pluggy as events do (only ``@hookimpl`` functions,
    signatures checked): ``tryfirst`` implementations first, ``trylast`` ones last, and
    registration order otherwise, so a built-in keeps its name when a later plugin
    registers the same one (the first registration of a name wins)."""
    first = [i for i in impls if i.tryfirst]
    last = [i for i in impls if i.trylast][::-1]  # pluggy stores them newest first
    return first + [i for i in impls if not (i.tryfirst or i.trylast)] + last


def _call_one(reg: Registry, kind: Kind, plugin_name: str, impl: Callable[..., Any]) -> None:
    staged: list[type[Component]] = []
    info = reg.plugins[plugin_name]
    try:
        impl(register=staged.append)
        for cls in staged:
            reg.add(kind, cls, plugin_name)
    except Exception as exc:
        reg.problems.append(
            PluginProblem(plugin_name, info.distribution, f"failed to register: {exc}")
        )


def register_plugin(plugin: object, name: str | None = None) -> str:
    """Register a plugin object at run time (apps, tests) and rebuild the registry."""
    global _registry
    with _lock:
        pm = get_plugin_manager()
        plugin_name = pm.register(plugin, name=name)
        if plugin_name is None:  # pragma: no cover - pluggy returns None if blocked
            raise ValueError(f"plugin {name!r} is blocked")
        _registry = None
        return plugin_name


def unregister_plugin(name: str) -> None:
    """Undo :func:`register_plugin`."""
    global _registry
    with _lock:
        pm = get_plugin_manager()
        pm.unregister(name=name)
        _registry = None


def reset() -> None:
    """Forget the manager and registry (tests; after changing ``CTXPOLICY_PLUGINS``)."""
    global _manager, _registry
    with _lock:
        _manager = None
        _registry = None


def emit_event(event: dict[str, Any]) -> list[str]:
    """Send an event to every ``ctxpolicy_event`` observer; returns problems seen."""
    pm = get_plugin_manager()
    problems: list[str] = []
    for impl in pm.hook.ctxpolicy_event.get_hookimpls():
        try:
            impl.function(event=event)
        except Exception as exc:
            problems.append(f"event observer of plugin {impl.plugin_name!r} raised {exc!r}")
    return problems
