"""Hook specifications of the ``ctxpolicy`` pluggy project.

Only specifications live here. Every hook is called by :mod:`ctxpolicy.plugins`
(or the engine, for ``ctxpolicy_event``); built-in components implement the same
hooks as third-party plugins. docs/plugins.md is checked against this file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("ctxpolicy")


@hookspec
def ctxpolicy_register_layers(register: Callable[[type], None]) -> None:
    """Register compaction layers.

    Called once, when the registry is first built (the first time a policy is
    resolved or ``ctxpolicy plugins`` runs). Call ``register(LayerClass)`` for each
    :class:`ctxpolicy.Layer` subclass the plugin provides; its ``name`` is what
    policy files write in ``layer:``. Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_register_preprocessors(register: Callable[[type], None]) -> None:
    """Register tool-result preprocessors.

    Called once when the registry is built. Call ``register(PreprocessorClass)``
    for each :class:`ctxpolicy.Preprocessor` subclass; policy files name it in
    ``tools: {<glob>: {preprocess: <name>}}``. Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_register_summarizers(register: Callable[[type], None]) -> None:
    """Register summarizers used by the ``summarize`` layer.

    Called once when the registry is built. Call ``register(SummarizerClass)`` for
    each :class:`ctxpolicy.Summarizer` subclass; named by the ``summarizer`` option
    of the layer. Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_register_tokenizers(register: Callable[[type], None]) -> None:
    """Register token-counting backends.

    Called once when the registry is built. Call ``register(TokenizerClass)`` for
    each :class:`ctxpolicy.Tokenizer` subclass; named in ``model.tokenizer`` chains
    as ``<name>`` or ``<name>:<encoding>``. Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_register_snapshot_stores(register: Callable[[type], None]) -> None:
    """Register snapshot stores.

    Called once when the registry is built. Call ``register(StoreClass)`` for each
    :class:`ctxpolicy.SnapshotStore` subclass; named by ``snapshots.store``.
    Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_register_state_stores(register: Callable[[type], None]) -> None:
    """Register durable session-state stores.

    Called once when the registry is built. Call ``register(StoreClass)`` for each
    :class:`ctxpolicy.StateStore` subclass; named by ``state.store``. A store keeps
    small JSON entries per conversation and commits them with a compare-and-set
    on a version (see docs/state.md). Returns nothing. Not ``firstresult``.
    """


@hookspec
def ctxpolicy_event(event: dict[str, Any]) -> None:
    """Observe an engine event (logs, metrics, tracing).

    Called by every :class:`ctxpolicy.Session` for each event it emits, e.g.
    ``context.status``, ``context.compacted``, ``tool.preprocessed``. ``event`` is a
    JSON-serialisable dict with at least ``type``, ``conv_id`` and ``ts``; do not
    mutate it. An observer that raises is reported once and otherwise ignored.
    Returns nothing. Not ``firstresult``.
    """
