"""Which tokenizer counts for a model: the fallback chain (``model.tokenizer``), its
resolution and the ``tokenizer.fallback`` events (the model table is
:mod:`ctxpolicy.tokens.models`)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ctxpolicy.components import Tokenizer, TokenizerUnavailable
from ctxpolicy.events.types import TokenizerFallback
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens.backends import (
    HeuristicTokenizer,
    QuicktokTokenizer,
    TiktokenTokenizer,
)
from ctxpolicy.tokens.models import (  # the model table; re-exported for one release
    CLOSEST,
    DEFAULT_ENCODING,
    MODEL_ENCODINGS,
    SORTED_PREFIXES,
    encoding_for_model,
    normalize_model,
    unpublished_tokenizer,
)

__all__ = [
    "CLOSEST",
    "DEFAULT_ENCODING",
    "MODEL_ENCODINGS",
    "TokenizerChoice",
    "TokenizerResolution",
    "default_chain",
    "encoding_for_model",
    "parse_chain",
    "resolve_chain",
]

Event = dict[str, Any]

# --------------------------------------------------------------------------- chain


@dataclass(frozen=True)
class TokenizerChoice:
    """One entry of a tokenizer chain: backend, encoding (None: from model), exact?"""

    backend: str
    encoding: str | None
    exact: bool = True

    @property
    def label(self) -> str:
        if self.backend == "heuristic":
            return "heuristic"
        return f"{self.backend}:{self.encoding}" if self.encoding else self.backend


_BACKENDS = {"tiktoken", "quicktok", "heuristic"}
#: Vocabularies only quicktok has: a bare name means quicktok (no tiktoken attempt to report).
_QUICKTOK_ONLY = {"qwen3", "llama3"}


def parse_chain(
    spec: str | Sequence[str], *, backends: set[str] | None = None
) -> list[TokenizerChoice]:
    """Parse ``model.tokenizer``: ``backend``, ``backend:encoding`` or a bare encoding.

    A bare encoding (``o200k_base``) means that vocabulary from any exact backend:
    ``tiktoken:o200k_base``, then ``quicktok:o200k_base`` (token-for-token identical,
    verified in docs/tokenizers.md), so an offline machine still counts exactly.
    """
    items = [spec] if isinstance(spec, str) else list(spec)
    known = _BACKENDS | (backends or set())
    out = []
    for item in items:
        item = item.strip()
        if ":" in item:
            backend, _, enc = item.partition(":")
            out.append(TokenizerChoice(backend.strip(), enc.strip() or None))
        elif item in known:
            out.append(TokenizerChoice(item, None))
        else:
            # a bare encoding: that exact vocabulary from any backend that has it
            if item not in _QUICKTOK_ONLY:
                out.append(TokenizerChoice("tiktoken", item))
            out.append(TokenizerChoice("quicktok", item))
    return out


def default_chain(model_name: str | None) -> tuple[list[TokenizerChoice], str | None]:
    """The chain used when ``model.tokenizer`` is unset, and why it is approximate (if so)."""
    if model_name:
        enc, exact = encoding_for_model(model_name)
        known = any(normalize_model(model_name).startswith(p) for p in SORTED_PREFIXES)
        why = (
            None
            if exact
            else f"no public tokenizer for model {model_name!r}; {enc} is the closest"
            if known
            else f"model {model_name!r} is not in ctxpolicy's tokenizer table; {enc} assumed "
            "(set model.tokenizer)"
        )
    else:
        enc, exact, why = DEFAULT_ENCODING, False, "no model name; cl100k_base assumed"
    chain = [TokenizerChoice("quicktok", enc, exact)]
    if enc not in _QUICKTOK_ONLY:
        chain.insert(0, TokenizerChoice("tiktoken", enc, exact))
    for alt in CLOSEST.get(enc, ()):
        chain += [TokenizerChoice("tiktoken", alt, False), TokenizerChoice("quicktok", alt, False)]
    if enc not in CLOSEST and enc != DEFAULT_ENCODING:
        chain += [
            TokenizerChoice("tiktoken", DEFAULT_ENCODING, False),
            TokenizerChoice("quicktok", DEFAULT_ENCODING, False),
        ]
    chain.append(TokenizerChoice("heuristic", None, False))
    return chain, why


def _tokenizer_classes() -> dict[str, type[Tokenizer]]:
    """Built-in backends plus those registered by plugins (built-ins keep their names)."""
    classes: dict[str, type[Tokenizer]] = {
        "tiktoken": TiktokenTokenizer,
        "quicktok": QuicktokTokenizer,
        "heuristic": HeuristicTokenizer,
    }
    try:
        from ctxpolicy.plugins import get_registry

        for name, cls in get_registry().tokenizers.items():
            if name not in classes and isinstance(cls, type) and issubclass(cls, Tokenizer):
                classes[name] = cls
    except Exception:  # registry problems are reported by `ctxpolicy plugins`
        pass
    return classes


@dataclass(frozen=True)
class TokenizerResolution:
    """What a model's tokenizer chain settled on, for ``explain`` and ``simulate``.

    * ``name`` — ``backend:encoding`` counting (``heuristic`` for the estimate);
    * ``exact`` — False when counts are estimates (heuristic, or the closest encoding);
    * ``wanted`` — the first entry of the chain; differs from ``name`` after a fallback;
    * ``fallback`` — why ``name`` is not ``wanted`` (or why it is approximate); None when
      the first choice loaded as is.
    """

    name: str
    exact: bool
    wanted: str
    fallback: str | None = None
    model: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "exact": self.exact,
            "wanted": self.wanted,
            "fallback": self.fallback,
        }

    def describe(self) -> str:
        """One line: ``quicktok:o200k_base (exact)`` or ``heuristic (APPROXIMATE: …)``."""
        if self.exact:
            return f"{self.name} (exact)"
        return f"{self.name} (APPROXIMATE: {self.fallback or 'estimate'})"


#: the documented logger of fallbacks (docs/tokenizers.md)
_log = logging.getLogger("ctxpolicy.tokens")
_warned: set[tuple[str, str, str | None]] = set()
_warned_lock = threading.Lock()


def _log_fallback(event: Event) -> None:
    """Log a fallback once per process: a warning when counts become approximate."""
    key = (str(event["wanted"]), str(event["using"]), event.get("model"))
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    model = f" for model {event['model']!r}" if event.get("model") else ""
    if event.get("approximate"):
        _log.warning(
            "token counts%s are APPROXIMATE: wanted %s, using %s (%s)",
            model,
            event["wanted"],
            event["using"],
            event["reason"],
        )
    else:
        _log.info(
            "tokenizer%s: %s instead of %s, identical counts (%s)",
            model,
            event["using"],
            event["wanted"],
            event["reason"],
        )


@dataclass
class ResolvedChain:
    """What :func:`resolve_chain` settled on for one counter."""

    tokenizer: Tokenizer
    approximate: bool
    resolution: TokenizerResolution
    fallbacks: list[Event] = field(default_factory=list)


def resolve_chain(
    model: ModelSpec, model_name: str | None, on_event: Callable[[Event], None] | None
) -> ResolvedChain:
    """Load the first tokenizer of ``model``'s chain that can load; every fallback is a
    ``tokenizer.fallback`` event (returned, logged once per process, and given to
    ``on_event``)."""
    classes = _tokenizer_classes()
    explicit = model.tokenizer is not None
    approx_why: str | None = None
    if model.tokenizer is not None:
        chain = parse_chain(model.tokenizer, backends=set(classes))
    else:
        chain, approx_why = default_chain(model_name)
    tried: list[dict[str, str]] = []
    chosen: Tokenizer | None = None
    choice: TokenizerChoice | None = None
    for c in chain:
        cls = classes.get(c.backend)
        if cls is None:
            tried.append({"tokenizer": c.label, "reason": f"no tokenizer backend {c.backend!r}"})
            continue
        try:
            tok = cls.load(c.encoding, model_name, None)
        except TokenizerUnavailable as exc:
            tried.append({"tokenizer": c.label, "reason": str(exc)})
            continue
        except Exception as exc:  # a broken plugin must not take counting down
            tried.append({"tokenizer": c.label, "reason": f"{type(exc).__name__}: {exc}"})
            continue
        chosen, choice = tok, c
        break
    if chosen is None or choice is None:
        reasons = "; ".join(f"{t['tokenizer']}: {t['reason']}" for t in tried)
        raise TokenizerUnavailable(
            f"no tokenizer of the chain {[c.label for c in chain]} could load ({reasons}); "
            "add `heuristic` to model.tokenizer to always have one"
        )
    using = "heuristic" if chosen.name == "heuristic" else f"{chosen.name}:{chosen.encoding}"
    # an explicit vocabulary for a model whose own tokenizer is not public (Claude,
    # Gemini, …) counts that vocabulary exactly, and the model only approximately
    family_approx = explicit and not chosen.approximate and unpublished_tokenizer(model_name)
    if family_approx:
        approx_why = f"no public tokenizer for model {model_name!r}; {using} approximates it"
    approximate = bool(chosen.approximate or not choice.exact or family_approx)
    fallbacks: list[Event] = []
    note = getattr(chosen, "note", None)
    if tried or note or (approximate and approx_why):
        reason_parts = [f"{t['tokenizer']}: {t['reason']}" for t in tried]
        if note:
            reason_parts.append(note)
        if approx_why and (not choice.exact or family_approx):
            reason_parts.append(approx_why)
        event: Event = TokenizerFallback(
            wanted=chain[0].label,
            using=using,
            reason="; ".join(reason_parts),
            approximate=approximate,
            model=model_name,
            tried=tried,
        ).as_dict()
        fallbacks.append(event)
        _log_fallback(event)
        if on_event is not None:
            with contextlib.suppress(Exception):  # an observer must not break counting
                on_event(dict(event))
    resolution = TokenizerResolution(
        name=using,
        exact=not approximate,
        wanted=chain[0].label,
        fallback=fallbacks[-1]["reason"] if fallbacks else None,
        model=model_name,
    )
    return ResolvedChain(chosen, approximate, resolution, fallbacks)
