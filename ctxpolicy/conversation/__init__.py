"""The message vocabulary every package speaks.

* :mod:`.messages` — accessors of one OpenAI Chat message (content text, fingerprint,
  a copy with another text, its tool calls and the call a tool result answers);
* :mod:`.images` — an image's width and height from its first bytes;
* :mod:`.units` — grouping into atomic units, pinning, the invariants of a context;
* :mod:`.refs` — the reference line ``[Full detail available at: …]``, one home;
* :mod:`.cut` — head/tail cutting with its elision marker, one-line shortening, the
  no-tokenizer estimate;
* :mod:`.redact` — the secret redaction the host applies to every tool result;
* :mod:`.repair` — repair of malformed tool calls; :mod:`.jsontext` — exact JSON text;
* :mod:`.facts` — the facts (paths, identifiers, errors, numbers) a text mentions.

The names below are the package's API (they were ``ctxpolicy.conversation`` before the
package existed); everything else is imported from its module.
"""

from __future__ import annotations

from ctxpolicy.conversation.messages import Message, content_text, message_fingerprint
from ctxpolicy.conversation.units import (
    MISSING_RESULT,
    Repair,
    Unit,
    UnitKind,
    Violation,
    check_messages,
    check_units,
    group_units,
    pin_units,
    render,
    rounds,
    to_units,
)

__all__ = [
    "MISSING_RESULT",
    "Message",
    "Repair",
    "Unit",
    "UnitKind",
    "Violation",
    "check_messages",
    "check_units",
    "content_text",
    "group_units",
    "message_fingerprint",
    "pin_units",
    "render",
    "rounds",
    "to_units",
]
