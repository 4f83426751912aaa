"""Base classes of every pluggable component, and what a layer receives.

Plugin authors subclass these (built-in components do too) and register the class
from a ``ctxpolicy_register_*`` hook. Each class declares:

* ``name`` — the name policy files use (``layer: keep_errors``);
* ``Options`` — a pydantic model (subclass of :class:`ComponentOptions`) that validates
  the ``options:`` mapping of the policy; its JSON Schema is published by
  ``ctxpolicy schema --plugins``;
* ``description`` — one line shown by ``ctxpolicy plugins``;
* ``tune_space`` — optional: option name → :class:`TuneRange`, the default search
  space of ``ctxpolicy tune`` for this component's options.

This module is light on purpose (no tiktoken, no engine): the validator imports it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.policy.scalars import State

if TYPE_CHECKING:
    from ctxpolicy.conversation import Unit

__all__ = [
    "CallableOptions",
    "CallableSummarizer",
    "CompactionContext",
    "Component",
    "ComponentOptions",
    "Layer",
    "LayerResult",
    "Preprocessor",
    "SnapshotRef",
    "SnapshotStore",
    "StateConflict",
    "StateStore",
    "StateStoreError",
    "StoredState",
    "Summarizer",
    "SummaryFn",
    "SummaryRequest",
    "Tokenizer",
    "TokenizerUnavailable",
    "ToolCall",
    "register_callable",
    "registered_callables",
    "unregister_callable",
]


class Component:
    """Common shape of all components."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[ComponentOptions]] = ComponentOptions
    tune_space: ClassVar[Mapping[str, TuneRange]] = {}

    def __init__(self, options: ComponentOptions | None = None) -> None:
        self.options = options if options is not None else self.Options()


# --------------------------------------------------------------------------- layers


@dataclass
class LayerResult:
    """What a layer returns.

    ``units`` is the new unit list (kept units unchanged or rewritten with
    :meth:`Unit.replace`, new units made with :meth:`Unit.summary`); ``dropped``
    the units it removed (the engine feeds them to the progress ledger);
    ``report`` free-form numbers for the ``context.compacted`` event.
    """

    units: list[Unit]
    dropped: list[Unit] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


@dataclass
class CompactionContext:
    """Everything a layer may use. Layers must not keep references to it.

    * ``count(units)`` — tokens of a unit list as it would be sent (cached, exact);
      it recounts the whole list, so call it a bounded number of times per ``apply``;
    * ``count_unit(unit)`` — tokens one unit adds to a list: its messages with their
      per-message framing, without the reply priming and tool schemas that
      ``count([])`` holds (None when the engine does not provide it; use
      :meth:`unit_counts`, which falls back on ``count``);
    * ``used`` — tokens of the list the layer receives; ``trigger``/``target``/
      ``window`` — the budget in tokens; ``state`` — the current state;
    * ``snapshots`` — the session's snapshot store (or None); ``conv_id``;
    * ``summarizer(name, options)`` — a ready summarizer instance;
    * ``ledger`` — the session's progress ledger (read it; the engine updates it from
      ``LayerResult.dropped``);
    * ``memory`` — a dict private to this layer and session that persists across
      ``prepare`` calls (e.g. a circuit breaker's failure count);
    * ``emit(type, **fields)`` — emit an event (``layer`` is filled in);
    * ``constraints`` — strings that must stay verbatim in the context.
    """

    count: Callable[[Sequence[Unit]], int]
    used: int
    window: int
    trigger: int
    target: int
    state: State
    conv_id: str
    summarizer: Callable[[str, Mapping[str, Any]], Summarizer]
    emit: Callable[..., None]
    memory: dict[str, Any] = field(default_factory=dict)
    snapshots: SnapshotStore | None = None
    ledger: Any = None
    constraints: Sequence[str] = ()
    count_text: Callable[[str], int] | None = None
    count_unit: Callable[[Unit], int] | None = None

    def unit_counts(self, units: Sequence[Unit]) -> list[int]:
        """Tokens each of ``units`` adds to a list, each unit counted once.

        With an additive counter (the engine's: per-message counts plus a fixed
        reply priming) ``count([]) + sum(unit_counts(xs)) == count(xs)`` for any
        sub-list ``xs``, so a layer can plan with prefix sums in linear time and
        check its result with one exact ``count``. Without ``count_unit`` each unit
        is measured as ``count([u]) - count([])``.
        """
        if self.count_unit is not None:
            return [self.count_unit(u) for u in units]
        base = self.count(())
        return [self.count((u,)) - base for u in units]


class Layer(Component):
    """A compaction layer: units in, units out. Must never split a unit.

    Rules (checked by the engine after every layer; a violation discards the
    layer's output and is reported with the plugin's name):

    * return :class:`LayerResult` with a list of units in conversation order;
    * never split a unit (an assistant step keeps all its tool results);
    * keep every pinned unit, unchanged;
    * do not mutate the units or messages received: build new ones;
    * be deterministic: same input and options, same output.
    """

    def apply(self, ctx: CompactionContext, units: Sequence[Unit]) -> LayerResult:
        raise NotImplementedError


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolCall:
    """The call a tool result answers."""

    name: str
    arguments: Any = None
    id: str | None = None


class Preprocessor(Component):
    """Turns a raw tool result into the text that enters the context.

    ``process`` gets the result as text and returns the shortened text. It must not
    raise on odd input; if it does, the engine falls back to ``head_tail`` and emits
    a ``tool.preprocess_failed`` event.
    """

    def process(self, text: str, call: ToolCall) -> str:
        raise NotImplementedError


# --------------------------------------------------------------------------- summaries


@dataclass
class SummaryRequest:
    """Input of a summarizer: the messages to fold, and the budget of the result."""

    messages: list[dict[str, Any]]
    previous_summary: str | None
    max_tokens: int
    instructions: str
    constraints: Sequence[str] = ()
    count_text: Callable[[str], int] | None = None
    #: The user's turns among the folded messages, verbatim: the summary must keep them
    #: (the ``summarize`` layer appends any it drops).
    user_turns: Sequence[str] = ()
    #: The live prompt (the conversation as the model last saw it, the messages to
    #: fold at its start) for a summarizer that continues it (``uses_prefix``): its
    #: input is then a cache read. None when only ``messages`` are given.
    prefix: Sequence[dict[str, Any]] | None = None
    #: Index in ``prefix`` of the first message kept after the folded part (None: the
    #: fold runs to the end of ``prefix``).
    keep_from: int | None = None


class Summarizer(Component):
    """Folds older messages into one summary text.

    Raise any exception to signal failure: the engine keeps history unchanged and
    counts the failure for the circuit breaker. Returning an empty string, or a text
    longer than ``max_tokens``, is also a failure.

    ``in_process``: True for a local computation that cannot block on I/O (the
    built-in ``extractive``): the ``summarize`` layer calls it in the caller's thread,
    without the thread that bounds a call by ``timeout_s``. ``uses_prefix``: True for
    one that reads the live prompt (``SummaryRequest.prefix``) instead of a transcript.
    """

    in_process: ClassVar[bool] = False
    #: True for a summarizer that continues ``SummaryRequest.prefix`` (the live prompt
    #: plus one instruction) when the ``summarize`` layer gives it one.
    uses_prefix: ClassVar[bool] = False

    def summarize(self, request: SummaryRequest) -> str:
        raise NotImplementedError


# --------------------------------------------------------------- summaries written in code
# The host adapts a plain function given in code (``Session(summarizer=fn)``) with
# :class:`CallableSummarizer`; the ``callable`` plugin (:mod:`ctxpolicy.summarizers.callable`)
# registers the same class so that a policy can name a function registered in code.

SummaryFn = Callable[[SummaryRequest], str]

_lock = threading.Lock()
_functions: dict[str, SummaryFn] = {}


def register_callable(name: str, fn: SummaryFn) -> None:
    """Make ``fn`` available to policies as ``summarizer_options: {ref: <name>}``."""
    if not callable(fn):
        raise TypeError(f"{fn!r} is not callable")
    with _lock:
        _functions[name] = fn


def unregister_callable(name: str) -> None:
    with _lock:
        _functions.pop(name, None)


def registered_callables() -> list[str]:
    with _lock:
        return sorted(_functions)


class CallableOptions(ComponentOptions):
    """Options of the ``callable`` summarizer."""

    ref: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][\w.-]*$",
        description="Name given to `ctxpolicy.summarizers.callable.register_callable` in code.",
    )


class CallableSummarizer(Summarizer):
    name = "callable"
    description = "Summary by a Python function registered in code (never an import path)."
    Options = CallableOptions
    options: CallableOptions

    def __init__(
        self, options: ComponentOptions | None = None, *, fn: SummaryFn | None = None
    ) -> None:
        super().__init__(options)
        self._fn = fn

    @classmethod
    def from_function(cls, fn: SummaryFn) -> CallableSummarizer:
        if not callable(fn):
            raise TypeError(f"{fn!r} is not callable")
        return cls(fn=fn)

    def summarize(self, request: SummaryRequest) -> str:
        fn = self._fn
        if fn is None:
            ref = self.options.ref
            if ref is None:
                raise LookupError("callable summarizer: no function given and no `ref` option")
            with _lock:
                fn = _functions.get(ref)
            if fn is None:
                raise LookupError(
                    f"callable summarizer: no function registered as {ref!r} "
                    f"(known: {', '.join(registered_callables()) or 'none'})"
                )
        return fn(request)


# --------------------------------------------------------------------------- tokens


class TokenizerUnavailable(RuntimeError):
    """Raised by :meth:`Tokenizer.load` when the backend or encoding cannot load."""


class Tokenizer(Component):
    """A token-counting backend (``tiktoken``, ``quicktok``, ``heuristic``, ...).

    ``load`` returns a ready instance for an encoding (or raises
    :class:`TokenizerUnavailable`); ``count`` counts one text.
    ``approximate`` is True when counts are estimates.
    """

    approximate: ClassVar[bool] = False

    def __init__(self, options: ComponentOptions | None = None, *, encoding: str = "") -> None:
        super().__init__(options)
        self.encoding = encoding

    @classmethod
    def load(
        cls, encoding: str | None, model: str | None, options: ComponentOptions | None = None
    ) -> Tokenizer:
        raise NotImplementedError

    def count(self, text: str) -> int:
        raise NotImplementedError


# --------------------------------------------------------------------------- snapshots


@dataclass(frozen=True)
class SnapshotRef:
    """A stable reference to one snapshot.

    ``uri`` is ``ctxsnap://<conv_id>/<name>``; ``path`` the local path or URL where
    the document lives (design A's ``[Full detail available at: <path>]``).
    """

    uri: str
    path: str
    conv_id: str
    name: str


class SnapshotStore(Component):
    """Keeps full tool results (JSON documents) so compaction loses nothing.

    Implementations must write atomically and keep every name inside their root.

    A conversation's documents live in one *folder* (:meth:`folder`, an injective
    encoding of the conversation id; see :mod:`ctxpolicy.snapshots.names`). The recall
    tools call :meth:`locate` to turn whatever reference the model passed into the
    canonical ``(folder, name)`` *before* checking that the folder is the caller's.

    The history archive (:class:`ctxpolicy.snapshots.archive.HistoryArchive`) appends to
    per-conversation logs through :meth:`append`, :meth:`read_range` and
    :meth:`size`. A store that does not override them (they raise
    ``NotImplementedError``) still works: the archive then writes one document per
    compaction with :meth:`write`.
    """

    def __init__(self, options: ComponentOptions | None = None, *, root: str = "") -> None:
        super().__init__(options)
        self.root = root

    def write(
        self, conv_id: str, step: int, action: str, document: Mapping[str, Any]
    ) -> SnapshotRef:
        raise NotImplementedError

    def read(self, ref: str) -> dict[str, Any]:
        """Return the document for a ``ctxsnap://`` URI or a path returned by ``write``."""
        raise NotImplementedError

    def list(self, conv_id: str) -> list[SnapshotRef]:
        raise NotImplementedError

    def folder(self, conv_id: str) -> str:
        """The folder name of a conversation (default: :func:`store_names.conv_folder`)."""
        from ctxpolicy.snapshots.names import conv_folder

        return conv_folder(conv_id)

    def locate(self, ref: str) -> SnapshotRef:
        """The canonical reference behind ``ref``, resolved *before* any ownership
        check; raises ``SnapshotError`` when ``ref`` names nothing of this store.

        The default accepts only ``ctxsnap://<folder>/<name>`` URIs (strictly
        parsed, no decoding); stores that also accept paths override it and resolve
        ``..``, symlinks and URL forms to the same canonical pair.
        """
        from ctxpolicy.snapshots.names import URI_SCHEME, SnapshotError, parse_uri

        parsed = parse_uri(ref)
        if parsed is None:
            raise SnapshotError(2, "not a snapshot reference of this store")
        folder, name = parsed
        return SnapshotRef(uri=f"{URI_SCHEME}{folder}/{name}", path="", conv_id=folder, name=name)

    def append(self, folder: str, name: str, data: bytes) -> int:
        """Append ``data`` to the log ``<folder>/<name>`` (created 0600 if absent) and
        return the offset it starts at. Must raise on any failure (nothing appended
        silently short). Optional: see the class docstring."""
        raise NotImplementedError

    def read_range(self, folder: str, name: str, offset: int, length: int) -> bytes:
        """``length`` bytes of the log ``<folder>/<name>`` from ``offset``."""
        raise NotImplementedError

    def size(self, folder: str, name: str) -> int:
        """Size in bytes of the log ``<folder>/<name>`` (0 when it does not exist)."""
        raise NotImplementedError


# --------------------------------------------------------------------------- state


class StateConflict(RuntimeError):
    """Another writer committed first: the stored version is not the expected one.

    The caller reloads (:meth:`StateStore.load`), redoes its work on the fresh
    state and commits again (bounded by ``state.max_conflict_retries``).
    """

    def __init__(self, conv_id: str, expected: int, found: int | None = None) -> None:
        self.conv_id = conv_id
        self.expected = expected
        self.found = found
        seen = "" if found is None else f", found {found}"
        super().__init__(
            f"state of conversation {conv_id!r} changed since version {expected}{seen}"
        )


class StateStoreError(RuntimeError):
    """The store cannot be opened or used (unreachable server, bad file, bad value).

    Messages name the store and its location but never a password or secret.
    """


@dataclass(frozen=True)
class StoredState:
    """What :meth:`StateStore.load` returns: a version and the entries at that version.

    ``version`` is 0 when nothing is stored for the conversation (``entries`` empty).
    """

    version: int
    entries: dict[str, Any] = field(default_factory=dict)


class StateStore(Component):
    """Durable session state: small JSON entries per conversation, versioned.

    Contract (tested for every store by ``tests/state/test_contract.py``):

    * ``load(conv_id)`` — the entries and their version, ``StoredState(0, {})`` if
      nothing is stored; one consistent snapshot (never half of a commit);
    * ``commit(conv_id, expected_version=, put=, delete=)`` — atomically applies the
      puts and deletes iff the stored version equals ``expected_version``
      (compare-and-set) and returns the new version, ``expected_version + 1``;
      otherwise raises :class:`StateConflict` and changes nothing. Only the given
      keys are written. Values must be JSON (no NaN/Infinity) and round-trip
      exactly; a value that is not is a :class:`StateStoreError` before anything
      is written;
    * ``close()`` — release connections; idempotent.

    ``home`` is the directory for embedded stores (the snapshot root when it is a
    local path); ``env`` the environment that ``${NAME}`` in options is
    interpolated from when the store is opened.
    """

    def __init__(
        self,
        options: ComponentOptions | None = None,
        *,
        home: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(options)
        self.home = home
        self.env = env

    def load(self, conv_id: str) -> StoredState:
        raise NotImplementedError

    def commit(
        self,
        conv_id: str,
        *,
        expected_version: int,
        put: Mapping[str, Any],
        delete: Iterable[str] = (),
    ) -> int:
        raise NotImplementedError

    def prune(self, *, before: float) -> int | None:
        """Delete every conversation whose last commit is older than ``before`` (epoch
        seconds), atomically per conversation (a conversation committed meanwhile
        stays); how many were deleted, or None when this store cannot prune."""
        return None

    def close(self) -> None:
        """Release resources (connections, file handles). Safe to call twice."""

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
