"""``command_output``: what a shell command printed, cleaned and cut.

For ``execute_command``-style tools. The result may be plain text or a JSON object
with ``stdout``/``stderr`` and ``exit_code``/``returncode``/``exit_status``/``status``
(what most agent frameworks return). The output is:

* ``[exit code N]`` first when the code is known (JSON field, or a line such as
  ``exit code: 1`` / ``Exit status 2`` / ``returncode=1`` in the text);
* stderr before stdout when they are separate;
* ANSI escapes removed, progress-bar redraws (``\\r``) reduced to their final state,
  runs of identical lines collapsed (``… line repeated 312 times``);
* per stream, the first ``head_lines`` and last ``tail_lines`` lines with a marker,
  followed by up to ``outline`` definition lines of the omitted part (a ``cat``
  of a source file still shows its functions);
* finally bounded by ``max_chars`` (head/tail by characters).

A command that asked for an explicit part of a file (``sed -n '120,180p' F``,
``head -n 40 F``, ``tail -n 30 F``, ``grep -m 5``, the same at the end of a pipeline,
or a plain ``cat F``) printed what the agent wants to read: its output is kept whole
while it is at most ``slice_max_tokens`` (a share of the window) on a window of at
least ``slice_min_window`` tokens, and cut as above otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from pydantic import Field

from ctxpolicy.components import Preprocessor, ToolCall
from ctxpolicy.conversation.cut import estimate_tokens
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.models import ComponentOptions, TuneRange
from ctxpolicy.policy.scalars import Amount, resolve_amount
from ctxpolicy.preprocessors._shell import asked_slice, command_text
from ctxpolicy.preprocessors._text import (
    OUTLINE_DESCRIPTION,
    clean_terminal,
    collapse_repeats,
    head_tail_chars,
    never_longer,
    omitted_lines_marker,
    outline,
)

_EXIT_AFTER_LINE_START = r"\W*(?:exit(?:ed)?[ _]?(?:code|status)|return[ _]?code|returncode|rc)\s*(?:[:=]|\s)\s*(-?\d{1,4})\b"
#: The rule: an exit-code line (its first match in a window of the text).
_EXIT_RE = re.compile(r"(?im)^" + _EXIT_AFTER_LINE_START)
# The same matches, found faster (:func:`_exit_code`): the start of the window, then a
# newline (a literal first character: the regex engine skips to each newline instead
# of trying every position); in lower case on an ASCII text (no case folding).
_EXIT_AT_START = re.compile("(?i)" + _EXIT_AFTER_LINE_START)
_EXIT_AFTER_NEWLINE = re.compile("(?i)\n" + _EXIT_AFTER_LINE_START)
_EXIT_AT_START_LOWER = re.compile(_EXIT_AFTER_LINE_START)
_EXIT_AFTER_NEWLINE_LOWER = re.compile("\n" + _EXIT_AFTER_LINE_START)
_WINDOW = 2000
#: ``slice_max_tokens`` by default, and the window a share is of when none is set
SLICE_DEFAULT = "8%"
_SLICE_WINDOW = 32768
#: ``slice_min_window`` by default: on the shared SWE traces (tune half) slices kept
#: whole at 16k made a run compact once more and keep fewer facts; at 32k they kept
#: 2 points more facts (7 more far facts) for about 1 % more of the bill
SLICE_MIN_WINDOW = 24576
_CODE_KEYS = ("exit_code", "returncode", "exit_status", "exitCode", "status", "code")


class CommandOutputOptions(ComponentOptions):
    """Options of ``command_output``."""

    head_lines: int = Field(default=40, ge=0, description="Lines kept at the start of each stream.")
    tail_lines: int = Field(default=60, ge=0, description="Lines kept at the end of each stream.")
    max_chars: int | None = Field(
        default=6000, ge=0, description="Upper bound of the whole result (head/tail by chars)."
    )
    collapse_repeats: int = Field(
        default=3, ge=2, description="Collapse runs of at least this many identical lines."
    )
    outline: int = Field(default=0, ge=0, description=OUTLINE_DESCRIPTION)
    slice_max_tokens: Amount | None = Field(
        default=SLICE_DEFAULT,
        description="Output of a command that asked for an explicit part of a file "
        "(`sed -n 'A,Bp' F`, `head -n N`, `tail -n N`, `grep -m N`, at the end of a "
        "pipeline, or a plain `cat F`) is kept whole up to this many estimated tokens "
        'or this share of the window (`"8%"`), instead of its first and last lines; '
        "`0` or `null`: such output is cut like any other.",
    )
    slice_min_window: int = Field(
        default=SLICE_MIN_WINDOW,
        ge=0,
        description="Slices are kept whole only on a window of at least this many "
        "tokens: on a small one the larger results bring the next compaction sooner.",
    )
    whole_reads: bool = Field(
        default=True,
        description="Whether a plain read of one file (`cat F`, `nl F`) counts as an "
        "explicit part (bounded by `slice_max_tokens` like a slice).",
    )
    window: int | None = Field(
        default=None,
        ge=1,
        description="The window a share in `slice_max_tokens` is of; set from the "
        "policy's window by the engine (unset: 32,768 tokens).",
    )


def _exit_code_in(window: str) -> str | None:
    """The code of ``_EXIT_RE.search(window)`` (its group 1), or None.

    A match of ``_EXIT_RE`` starts at a line start: the window's start or just after a
    newline, so the first match is the match at the start, else the first newline
    followed by a match (the newline is not part of the group). On an ASCII text the
    case-insensitive pattern matches where its lower-case letters match the lower-cased
    text (ASCII letters fold to ASCII letters only; no other character changes)."""
    if window.isascii():
        low = window.lower()
        m = _EXIT_AT_START_LOWER.match(low) or _EXIT_AFTER_NEWLINE_LOWER.search(low)
    else:
        m = _EXIT_AT_START.match(window) or _EXIT_AFTER_NEWLINE.search(window)
    return None if m is None else m.group(1)


def _exit_code(text: str) -> str | None:
    """The exit code a plain-text result states: in its last 2,000 characters, else in
    its first 2,000 (one window when the text is no longer than that)."""
    code = _exit_code_in(text[-_WINDOW:])
    if code is None and len(text) > _WINDOW:
        code = _exit_code_in(text[:_WINDOW])
    return code


def _structured(text: str) -> dict[str, Any] | None:
    s = text.lstrip()
    if not s.startswith("{") or len(s) > 50_000_000:
        return None
    try:
        obj = json.loads(s)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not ({"stdout", "stderr", "output"} & obj.keys()):
        return None
    return obj


class CommandOutput(Preprocessor):
    name = "command_output"
    description = "Exit code, stderr first, cleaned head/tail of stdout, repeated lines collapsed."
    Options = CommandOutputOptions
    tune_space: ClassVar[dict[str, TuneRange]] = {
        "head_lines": TuneRange(low=5, high=80, step=5),
        "tail_lines": TuneRange(low=10, high=120, step=5),
    }

    options: CommandOutputOptions

    def _stream(self, text: str, *, cut: bool = True) -> list[str]:
        opts = self.options
        lines = clean_terminal(text).split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        lines = collapse_repeats(lines, min_repeats=opts.collapse_repeats)
        n = len(lines)
        if not cut or n <= opts.head_lines + opts.tail_lines + 1:
            return lines
        tail_start = n - opts.tail_lines
        out = lines[: opts.head_lines]
        out.append(omitted_lines_marker(opts.head_lines + 1, tail_start))
        out.extend(outline(lines[opts.head_lines : tail_start], opts.head_lines + 1, opts.outline))
        out.extend(lines[tail_start:])
        return out

    def slice_bound(self, call: ToolCall | None) -> int | None:
        """The tokens the output of ``call`` may keep whole: ``slice_max_tokens`` when
        its command asked for an explicit part of a file, else None."""
        opts = self.options
        window = opts.window or _SLICE_WINDOW
        if not opts.slice_max_tokens or call is None or window < opts.slice_min_window:
            return None
        command = command_text(call.arguments)
        if command is None:
            return None
        asked = asked_slice(command)
        if asked is None or (asked == "file" and not opts.whole_reads):
            return None
        bound = resolve_amount(opts.slice_max_tokens, window)
        return bound or None

    def _render(self, text: str, *, cut: bool) -> str:
        parts: list[str] = []
        obj = _structured(text)
        if obj is not None:
            code = next((obj[k] for k in _CODE_KEYS if isinstance(obj.get(k), int)), None)
            if code is not None:
                parts.append(f"[exit code {code}]")
            for key in ("stderr", "stdout", "output"):
                val = obj.get(key)
                if val is None or val == "":
                    continue
                val = val if isinstance(val, str) else json.dumps(val, ensure_ascii=False)
                parts.append(f"[{key}]")
                parts.extend(self._stream(val, cut=cut))
        else:
            code = _exit_code(text)
            if code is not None:
                parts.append(f"[exit code {code}]")
            parts.extend(self._stream(text, cut=cut))
        return "\n".join(parts)

    def process(self, text: str, call: ToolCall | None = None) -> str:
        bound = self.slice_bound(call)
        # a text over 8 characters a token cannot come under the bound (an estimate
        # is at least a token per 4 characters; cleaning rarely halves it)
        if bound is not None and len(text) <= 8 * bound:
            whole = self._render(text, cut=False)
            if estimate_tokens(whole) <= bound:
                return never_longer(text, whole)
        out = self._render(text, cut=True)
        if self.options.max_chars is not None:
            out = head_tail_chars(out, self.options.max_chars)
        return never_longer(text, out)


@hookimpl
def ctxpolicy_register_preprocessors(register):  # type: ignore[no-untyped-def]
    register(CommandOutput)
