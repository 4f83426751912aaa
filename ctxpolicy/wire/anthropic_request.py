"""An Anthropic Messages request being assembled: turns of blocks, ``system``, and
the prompt-cache breakpoints (``cache_control``) placed on request."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EPHEMERAL",
    "MAX_BREAKPOINTS",
    "OMITTED_PREFIX",
    "AnthropicRequest",
    "CacheBreakpoints",
    "Turn",
]
#: The Messages API accepts at most this many ``cache_control`` breakpoints.
MAX_BREAKPOINTS = 4
EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
OMITTED_PREFIX = "[earlier conversation omitted to fit the context window]"


class Turn:
    """One turn being assembled: a user turn keeps its ``tool_result`` blocks apart from
    its other blocks (they go first), so merging costs the blocks added, not the turn."""

    def __init__(self, role: str, blocks: list[Any]) -> None:
        self.role = role
        self.plain: str | None = None
        self.results: list[dict[str, Any]] = []
        self.others: list[dict[str, Any]] = []
        if len(blocks) == 1 and isinstance(blocks[0], str):
            self.plain = blocks[0]
            return
        for b in blocks:
            b = {"type": "text", "text": b} if isinstance(b, str) else b
            self._put(b)

    def _put(self, b: dict[str, Any]) -> tuple[bool, int]:
        if self.role == "user" and b.get("type") == "tool_result":
            self.results.append(b)  # before the turn's other blocks, whenever it comes
            return True, len(self.results) - 1
        self.others.append(b)
        return False, len(self.others) - 1

    def last(self) -> tuple[bool, int]:
        if self.plain is not None:
            return False, 0
        if self.others:
            return False, len(self.others) - 1
        return True, len(self.results) - 1

    def add(self, blocks: list[Any]) -> tuple[bool, int]:
        if self.plain is not None:
            if self.plain:
                self.others.append({"type": "text", "text": self.plain})
            self.plain = None
        at: tuple[bool, int] | None = None
        for b in blocks:
            b = {"type": "text", "text": b} if isinstance(b, str) else b
            if b.get("type") == "text" and not b.get("text"):
                continue
            at = self._put(b)
        return at if at is not None else self.last()

    def index(self, at: tuple[bool, int]) -> int:
        """The position in the final content of a block placed at ``at``."""
        is_result, k = at
        return k if is_result or self.plain is not None else len(self.results) + k

    def message(self) -> dict[str, Any]:
        if self.plain is not None:
            return {"role": self.role, "content": self.plain}
        return {"role": self.role, "content": [*self.results, *self.others]}


@dataclass
class CacheBreakpoints:
    """Where the adapter put ``cache_control`` markers (for tests and events)."""

    stable_index: int | None  # index in the prepared list of the last stable message
    positions: list[tuple[int, int]]  # (message index or -1 for system, block index)


@dataclass
class AnthropicRequest:
    """``system`` + ``messages`` ready for ``messages.create``."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    system_was_string: bool = False
    breakpoints: CacheBreakpoints | None = None

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages}
        if self.system:
            plain = (
                self.system_was_string
                and len(self.system) == 1
                and set(self.system[0]) == {"type", "text"}
            )
            out["system"] = self.system[0]["text"] if plain else self.system
        return out

    def _count_markers(self) -> int:
        n = sum(1 for b in self.system if isinstance(b, dict) and "cache_control" in b)
        for m in self.messages:
            if isinstance(m["content"], list):
                n += sum(1 for b in m["content"] if isinstance(b, dict) and "cache_control" in b)
        return n

    def _mark(self, pos: tuple[int, int]) -> bool:
        mi, bi = pos
        if mi == -1:
            if not (0 <= bi < len(self.system)):
                return False
            block = self.system[bi]
        else:
            if not (0 <= mi < len(self.messages)):
                return False
            msg = self.messages[mi]
            if isinstance(msg["content"], str):
                if not msg["content"]:
                    return False
                msg["content"] = [{"type": "text", "text": msg["content"]}]
                bi = 0
            if not (0 <= bi < len(msg["content"])):
                return False
            block = msg["content"][bi]
        if not isinstance(block, dict) or block.get("type") in ("thinking", "redacted_thinking"):
            return False
        if block.get("type") == "text" and not block.get("text"):
            return False
        if "cache_control" not in block:
            block["cache_control"] = dict(EPHEMERAL)
        return True

    def place_breakpoints(
        self,
        where: Mapping[int, tuple[int, int]],
        stable_index: int | None,
        *,
        cache_tail: bool,
    ) -> None:
        wanted: list[tuple[int, int]] = []
        if stable_index is not None:
            # the last block of the stable prefix; walk back over messages that map nowhere
            for i in range(stable_index, -1, -1):
                if i in where:
                    wanted.append(where[i])
                    break
        elif 0 in where and where[0][0] == -1:
            wanted.append(where[0])  # the caller's system prompt (not the ledger after it)
        elif self.system:
            wanted.append((-1, len(self.system) - 1))
        if cache_tail and self.messages:
            last = self.messages[-1]
            bi = 0 if isinstance(last["content"], str) else len(last["content"]) - 1
            tail = (len(self.messages) - 1, bi)
            if tail not in wanted:
                wanted.append(tail)
        placed: list[tuple[int, int]] = []
        for pos in wanted:
            if self._count_markers() >= MAX_BREAKPOINTS:
                break
            if self._mark(pos):
                placed.append(pos)
        self.breakpoints = CacheBreakpoints(stable_index=stable_index, positions=placed)
