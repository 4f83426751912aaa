"""Durable session state: stores that keep a conversation's state across processes.

Three stores are built in, each a plugin registered through
``ctxpolicy_register_state_stores`` like any third-party one:

* ``sqlite`` (default) — an embedded file beside the snapshots (WAL mode), so an
  agent that restarts with the same ``conv_id`` resumes with no configuration;
* ``postgres`` — one server shared by a fleet of workers (psycopg 3, extra
  ``ctxpolicy[postgres]``);
* ``memory`` — nothing outlives the process (tests, one-shot scripts).

Every store implements :class:`ctxpolicy.StateStore`: ``load`` returns a version
and small JSON entries, ``commit`` writes only the given keys with a
compare-and-set on the version. :func:`open_state_store` opens the store a policy
names. See docs/state.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ctxpolicy.components import StateConflict, StateStore, StateStoreError, StoredState
from ctxpolicy.plugins import ComponentError, get_registry
from ctxpolicy.policy.models import Policy

__all__ = [
    "StateConflict",
    "StateStore",
    "StateStoreError",
    "StoredState",
    "open_state_store",
    "state_home",
]


def state_home(policy: Policy, env: Mapping[str, str] | None = None) -> str:
    """The directory embedded stores default to: the snapshot root when it is local.

    A snapshot root that is a URL (``s3://…``) cannot hold a database file; then
    the home is ``${CTXPOLICY_HOME:-~/.ctxpolicy}``.
    """
    from ctxpolicy.policy.paths import interpolate_path

    env = os.environ if env is None else env
    try:
        root = interpolate_path(policy.snapshots.path, env)
    except ValueError:
        root = ""
    local = policy.snapshots.store == "local" or root.startswith("file://")
    if root and local and "://" not in root.removeprefix("file://"):
        return os.path.abspath(root.removeprefix("file://"))
    return interpolate_path("${CTXPOLICY_HOME:-~/.ctxpolicy}", env)


def open_state_store(
    policy: Policy,
    registry: Any = None,
    *,
    env: Mapping[str, str] | None = None,
) -> StateStore:
    """Open the state store a policy names (``state.store`` with ``state.options``).

    Raises :class:`StateStoreError` (naming the store, never a secret) when the
    store cannot be opened, e.g. a server that does not answer.
    """
    spec = policy.state
    if registry is None:
        registry = get_registry()
    try:
        store = registry.create(
            "state_store", spec.store, spec.options, home=state_home(policy, env), env=env
        )
    except ComponentError as exc:
        raise StateStoreError(str(exc)) from None
    assert isinstance(store, StateStore)
    return store
