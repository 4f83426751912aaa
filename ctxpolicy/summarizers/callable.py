"""``callable`` — a summary written by a Python function given in code.

In code: ``CallableSummarizer.from_function(fn)`` (``fn(request) -> str``). In a
policy file only a *name* can appear — ``{summarizer: callable,
summarizer_options: {ref: my_summary}}`` — looked up in a process registry filled
by :func:`register_callable`; a policy never names an import path or runs code.

The class and the function registry live in :mod:`ctxpolicy.components` (the host adapts
a plain function given to ``Session`` with it); this module registers the class.
"""

from __future__ import annotations

from ctxpolicy.components import CallableSummarizer
from ctxpolicy.plugins import hookimpl

__all__ = ["CallableSummarizer"]


@hookimpl
def ctxpolicy_register_summarizers(register):  # type: ignore[no-untyped-def]
    register(CallableSummarizer)
