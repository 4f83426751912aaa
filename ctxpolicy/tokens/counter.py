"""The :class:`TokenCounter`: counts of texts, messages and message lists for one
model, with the caches that make a growing conversation cost O(new messages)."""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxpolicy.components import Tokenizer
from ctxpolicy.conversation import message_fingerprint
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.tokens.chain import TokenizerResolution, resolve_chain
from ctxpolicy.tokens.framing import ChatFraming, Overhead
from ctxpolicy.tokens.msgkeys import (
    NO_SNAPSHOT,
    _digest,
    _freeze,
    _Seq,
    _seq_key,
    snapshot,
    value_key,
)

__all__ = ["TokenCounter"]

Event = dict[str, Any]
#: A message's cache entry: its values (kept alive: their ids key tier 1), the
#: snapshot it is valid for, its token count, and its value key.
Entry = tuple[Any, Any, int, Any]
#: Texts from this length on have their counts kept (:meth:`TokenCounter.count_text`);
#: shorter ones encode in a few microseconds and would only churn the cache (a
#: summarizer's JSON rendering of every message it folds).
LONG_TEXT = 512


def _drop_oldest(d: dict[Any, Any], size: int) -> dict[Any, Any]:
    """``d`` without its oldest entries, a quarter of ``size`` below ``size``: evicting
    in batches into a fresh dict costs O(1) per insert (popping the first key one by
    one rescans the deleted slots at the front of the table each time)."""
    drop = len(d) - size + size // 4
    return dict(itertools.islice(d.items(), drop, None))


class TokenCounter(ChatFraming):
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
        self.model = model
        self.model_name = model.name or model_name
        ChatFraming.__init__(self, overhead, self.model_name)
        self.cache_size = max(1, int(cache_size))
        self.hot_size = max(
            1, int(hot_size if hot_size is not None else min(self.cache_size, 16384))
        )
        self._lock = threading.Lock()
        self._by_vals: dict[Any, Entry] = {}  # value ids → (values, snap, count, value key)
        self._hot: OrderedDict[Any, int] = OrderedDict()  # frozen message → count
        self._seqs: OrderedDict[Any, _Seq] = OrderedDict()  # first message → counted list
        self.seq_slots = 64
        self._by_digest: OrderedDict[bytes, int] = OrderedDict()  # content digest → count
        self._fps: dict[Any, tuple[Any, Any, str]] = {}  # value ids → (values, snap, fp)
        self._short: dict[str, int] = {}
        self._long: dict[str, int] = {}  # long text → count, bounded by characters
        self._long_chars = 0
        #: characters of long texts whose counts are kept (one text at most a quarter)
        self.text_cache_chars = 4_000_000
        self._hits = self._value_hits = self._digest_hits = self._misses = 0
        self._evictions = self._seq_hits = 0
        chain = resolve_chain(model, self.model_name, on_event)
        self.tokenizer: Tokenizer = chain.tokenizer
        self.approximate: bool = chain.approximate
        self.resolution: TokenizerResolution = chain.resolution
        self.fallbacks: list[Event] = chain.fallbacks
        self.encoding: str = self.tokenizer.encoding
        self.name: str = (
            "heuristic"
            if self.tokenizer.name == "heuristic"
            else f"{self.tokenizer.name}:{self.encoding}"
        )
        self._count = self.tokenizer.count

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
        if len(text) < LONG_TEXT:
            return self._count(text)
        # a long text (a tool result) is often counted twice: by ``add_tool_result``,
        # then inside its message by ``prepare``; hashing it costs far less than encoding
        n = self._long.get(text)
        if n is None:
            n = self._count(text)
            if len(text) <= self.text_cache_chars // 4:
                with self._lock:
                    if text not in self._long:  # another thread may have added it
                        self._long[text] = n
                        self._long_chars += len(text)
                        if self._long_chars > self.text_cache_chars:
                            self._evict_texts()
        return n

    def _evict_texts(self) -> None:
        """Forget the oldest long texts until half the budget of characters is free."""
        excess = self._long_chars - self.text_cache_chars // 2
        freed = drop = 0
        for text in self._long:  # oldest first
            if freed >= excess:
                break
            freed += len(text)
            drop += 1
        self._long = dict(itertools.islice(self._long.items(), drop, None))
        self._long_chars -= freed

    # -- messages ------------------------------------------------------------------
    def reserve(self, n: int) -> None:
        """Keep at least ``n`` messages (and a quarter more) in the identity and value
        tiers. The engine reserves the size of the conversation it prepares: one
        ``prepare`` looks up each message more than once, and a tier smaller than
        the conversation would evict every message before its next lookup (then
        each is keyed, hashed and demoted again)."""
        want = n + n // 4
        if want > self.hot_size:
            self.hot_size = want

    def lookup(self, msg: Mapping[str, Any], fresh_key: bool = False) -> Entry:
        """Cache entry ``(values, snapshot, count, value key)`` of one message.

        Tier 1 is keyed by the identities of the message's values, so the message
        itself and its shallow copies (``dict(m)``) hit. The entry holds those values,
        so their ids cannot be reused while it lives; it is valid while the message
        still equals the snapshot taken when it was counted (containers copied, leaf
        strings shared: a C-speed comparison that catches in-place edits of nested
        lists such as ``tool_calls``). Tier 2 is keyed by value (deep copies), tier 3
        by a content hash (entries demoted from tier 2; keeps no text alive).

        The value key of a tier-1 hit is the one of the message first counted (equal,
        but ``1 == True`` and nested key order may differ); ``fresh_key`` recomputes
        it from ``msg`` then, for callers that hash it.
        """
        vals: tuple[Any, ...] | None = None
        if type(msg) is dict:
            vals = tuple(msg.values())
            ikey = (tuple(msg), tuple(map(id, vals)))
            e = self._by_vals.get(ikey)
            if e is not None and msg == e[1]:
                self._hits += 1
                return (e[0], e[1], e[2], value_key(msg)) if fresh_key else e
            key: Any = value_key(msg)
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
        snap = snapshot(msg) if vals is not None else NO_SNAPSHOT
        e = (vals, snap, count, key)
        if snap is not NO_SNAPSHOT:
            with self._lock:
                self._by_vals[ikey] = e
                if len(self._by_vals) > self.hot_size:
                    self._by_vals = _drop_oldest(self._by_vals, self.hot_size)
        return e

    def count_message(self, msg: Mapping[str, Any]) -> int:
        """Tokens of one message with its framing (see docs/tokenizers.md, "Chat overhead")."""
        return int(self.lookup(msg)[2])

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
        lookup = self.lookup
        for m in msgs[k:]:
            e = lookup(m)
            total += e[2]
            new_snaps.append(e[1])
            new_cums.append(total)
        if skey is None or any(x is NO_SNAPSHOT for x in new_snaps):
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
        snap = snapshot(msg)
        if snap is not NO_SNAPSHOT:
            with self._lock:
                self._fps[ikey] = (vals, snap, fp)
                if len(self._fps) > self.hot_size:
                    self._fps = _drop_oldest(self._fps, self.hot_size)
        return fp

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
            self._long.clear()
            self._long_chars = 0

    def __repr__(self) -> str:
        return f"TokenCounter({self.name!r}, approximate={self.approximate})"
