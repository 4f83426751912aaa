"""Recognising a provider's context-overflow error (host code, used by ``Session.on_error``).

:func:`is_context_overflow` and :func:`parse_limit` read an exception, an error
body or a message against a pattern table of the providers' wordings
(``context_length_exceeded``, "maximum context length", …) that applications and
plugins extend with :func:`register_overflow_pattern`.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "OverflowPattern",
    "is_context_overflow",
    "overflow_patterns",
    "parse_limit",
    "register_overflow_pattern",
    "unregister_overflow_pattern",
]


_N = r"(?P<limit>\d[\d,_]*)"


@dataclass(frozen=True)
class OverflowPattern:
    """One way a provider says "the prompt does not fit".

    ``regex`` is searched (case-insensitive) in every text found on the error; a
    named group ``limit`` in it, when matched, is the real context limit.
    """

    provider: str
    regex: re.Pattern[str]


def _p(provider: str, regex: str) -> OverflowPattern:
    return OverflowPattern(provider, re.compile(regex, re.IGNORECASE))


#: Patterns with a ``limit`` group come first so :func:`parse_limit` finds the limit.
_BUILTIN: tuple[OverflowPattern, ...] = (
    # OpenAI / Azure OpenAI / Groq / vLLM (OpenAI-compatible):
    # "This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens."
    _p("openai", rf"maximum context length is {_N}\s*tokens"),
    # Anthropic: "prompt is too long: 210000 tokens > 200000 maximum"
    _p("anthropic", rf"prompt is too long:\s*\d[\d,]*\s*tokens\s*>\s*{_N}\s*maximum"),
    # Anthropic: "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000"
    _p("anthropic", rf"exceed context limit:\s*\d[\d,]*\s*\+\s*\d[\d,]*\s*>\s*{_N}"),
    # vLLM: "The prompt (total length 5000) is too long to fit into the model (context length 4096)"
    _p("vllm", rf"too long to fit into the model \(context length {_N}\)"),
    # vLLM: "Input prompt (5000 tokens) is too long and exceeds limit of 4096"
    _p("vllm", rf"is too long and exceeds limit of {_N}"),
    # vLLM / SGLang: "... longer than the model's context length (4096 tokens)"
    _p("sglang", rf"longer than the model'?s context length \({_N}\s*tokens?\)"),
    # SGLang: "Requested token count exceeds the model's maximum context length of 4096 tokens"
    _p("sglang", rf"exceeds the model'?s maximum context length of {_N}"),
    # Mistral: "Prompt contains 40000 tokens ..., too large for model with 32768 maximum context length"
    _p("mistral", rf"too large for model with {_N} maximum context length"),
    # Gemini: "The input token count (1234567) exceeds the maximum number of tokens allowed (1048576)."
    _p(
        "gemini",
        rf"input token count \(?\d[\d,]*\)? exceeds the maximum number of tokens allowed \({_N}\)",
    ),
    # llama.cpp server: "the request exceeds the available context size (4096 tokens)"
    _p("llama.cpp", rf"exceeds the available context size(?:,| \(){_N}"),
    # Ollama / generic: "input length exceeds the context length (4096)"
    _p("ollama", rf"exceeds (?:the )?(?:maximum )?context (?:length|window)(?: of)? \(?{_N}"),
    # code-only / limit-less forms
    _p("openai", r"context_length_exceeded"),
    _p("openai", r"maximum context length"),
    _p("anthropic", r"prompt is too long"),
    _p("litellm", r"ContextWindowExceededError"),
    _p("design-a", r"context_too_long"),
    _p("azure", r"tokens_limit_reached|The input or output tokens must be reduced"),
    _p("vllm", r"too long to fit into the model|exceeds the max(?:imum)? model length"),
    _p("ollama", r"exceeds the (?:maximum )?context (?:length|window|size)"),
    _p("gemini", r"exceeds the maximum number of tokens allowed"),
    _p("llama.cpp", r"exceeds the available context size"),
    _p("bedrock", r"input is too long for requested model|too many input tokens"),
    _p("generic", r"context[ _]window[ _](?:exceeded|is full)|context length exceeded"),
    _p("generic", r"reduce the length of the (?:messages|prompt|input)"),
)

_lock = threading.Lock()
_extra: list[OverflowPattern] = []

#: Exception class names (anywhere in the MRO) that mean an overflow.
_CLASS_NAMES = {"ContextWindowExceededError", "ContextLengthExceededError", "ContextTooLongError"}
#: Error codes (``code``/``type`` fields) that mean an overflow.
_CODES = {
    "context_length_exceeded",
    "context_too_long",
    "context_window_exceeded",
    "string_above_max_length_tokens",
}


def register_overflow_pattern(
    regex: str | re.Pattern[str], provider: str = "custom"
) -> OverflowPattern:
    """Add a pattern (searched case-insensitively) recognising an overflow error.

    A named group ``limit`` lets :func:`parse_limit` read the real limit. Patterns
    registered at run time are tried before the built-in table.
    """
    rx = regex if isinstance(regex, re.Pattern) else re.compile(regex, re.IGNORECASE)
    pat = OverflowPattern(provider, rx)
    with _lock:
        _extra.insert(0, pat)
    return pat


def unregister_overflow_pattern(pattern: OverflowPattern) -> None:
    """Undo :func:`register_overflow_pattern`."""
    with _lock:
        if pattern in _extra:
            _extra.remove(pattern)


def overflow_patterns() -> list[OverflowPattern]:
    """The pattern table in the order it is tried."""
    with _lock:
        return [*_extra, *_BUILTIN]


def _json_texts(obj: Any, out: list[str], depth: int = 0) -> None:
    if depth > 6:
        return
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, Mapping):
        for k in sorted(obj, key=str):
            if k in (
                "message",
                "code",
                "type",
                "error",
                "detail",
                "details",
                "reason",
                "status",
                "msg",
            ):
                _json_texts(obj[k], out, depth + 1)
    elif isinstance(obj, list | tuple):
        for v in obj[:20]:
            _json_texts(v, out, depth + 1)


def _texts(exc: Any) -> tuple[list[str], set[str]]:
    """Texts found on an error (or a message), and the class names in its chain."""
    texts: list[str] = []
    names: set[str] = set()
    seen: set[int] = set()
    cur: Any = exc
    while cur is not None and id(cur) not in seen and len(seen) < 8:
        seen.add(id(cur))
        if isinstance(cur, str):
            texts.append(cur)
            break
        if isinstance(cur, Mapping):
            _json_texts(cur, texts)
            break
        names.update(c.__name__ for c in type(cur).__mro__)
        for attr in ("code", "type", "message", "body", "detail"):
            try:
                v = getattr(cur, attr, None)
            except Exception:  # pragma: no cover - odd properties
                continue
            if isinstance(v, str | Mapping | list):
                _json_texts(v, texts)
        resp = getattr(cur, "response", None)
        if resp is not None:
            try:
                _json_texts(resp.json(), texts)
            except Exception:
                with contextlib.suppress(Exception):
                    t = getattr(resp, "text", None)
                    if isinstance(t, str):
                        texts.append(t[:4000])
        with contextlib.suppress(Exception):
            texts.append(str(cur))
        cur = cur.__cause__ or cur.__context__
    return texts, names


def _maybe_json(texts: list[str]) -> list[str]:
    out = list(texts)
    for t in texts:
        s = t.strip()
        if s.startswith("{") and len(s) < 100_000:
            with contextlib.suppress(ValueError):
                _json_texts(json.loads(s), out)
    return out


def is_context_overflow(exc_or_message: Any) -> bool:
    """True when an exception, error body or message says the prompt exceeds the context.

    Looks at the exception class names (e.g. LiteLLM ``ContextWindowExceededError``),
    ``code``/``type``/``message``/``body`` attributes, the HTTP response's JSON,
    ``str(exc)`` and the exception chain, against :func:`overflow_patterns`.
    """
    if exc_or_message is None:
        return False
    texts, names = _texts(exc_or_message)
    if names & _CLASS_NAMES:
        return True
    texts = _maybe_json(texts)
    if any(t.strip().lower() in _CODES for t in texts):
        return True
    pats = overflow_patterns()
    return any(p.regex.search(t) for t in texts for p in pats)


def parse_limit(exc_or_message: Any) -> int | None:
    """The real context limit (tokens) stated in an overflow error, or None."""
    if exc_or_message is None:
        return None
    texts, _ = _texts(exc_or_message)
    texts = _maybe_json(texts)
    for p in overflow_patterns():
        if "limit" not in p.regex.groupindex:
            continue
        for t in texts:
            m = p.regex.search(t)
            if m and m.group("limit"):
                try:
                    value = int(m.group("limit").replace(",", "").replace("_", ""))
                except ValueError:  # pragma: no cover
                    continue
                if value > 0:
                    return value
    return None


# --------------------------------------------------------------------------- layer
