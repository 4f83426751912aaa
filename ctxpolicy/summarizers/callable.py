"""``callable`` — a summary written by a Python function given in code.

In code: ``CallableSummarizer.from_function(fn)`` (``fn(request) -> str``). In a
policy file only a *name* can appear — ``{summarizer: callable,
summarizer_options: {ref: my_summary}}`` — looked up in a process registry filled
by :func:`register_callable`; a policy never names an import path or runs code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import Field

from ctxpolicy.components import ComponentOptions, Summarizer, SummaryRequest
from ctxpolicy.plugins import hookimpl

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


@hookimpl
def ctxpolicy_register_summarizers(register):  # type: ignore[no-untyped-def]
    register(CallableSummarizer)
