"""Whether a shell command asked for an explicit, bounded part of a file.

``sed -n '120,180p' F``, ``head -n 40 F``, ``tail -n 30 F``, ``grep -m 5 …``, the same
at the end of a pipeline (``nl -ba F | sed -n '1,80p'``, ``grep -n x F | head -20``),
or a plain ``cat F`` / ``nl F``: what such a command printed is what the agent asked
to read, so ``command_output`` keeps it whole up to a bound instead of cutting its
middle.

The parse is one pass over at most :data:`MAX_COMMAND` characters (a longer command
is not a slice), with no regular expression: linear in the command, whatever it
holds. Anything the parse does not understand (command substitution, subshells,
here-documents, an unterminated quote) is not a slice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["MAX_COMMAND", "Asked", "asked_slice", "command_text"]

#: Longest command parsed (characters); a longer one is not a slice.
MAX_COMMAND = 4096
#: What a command asked for: a bounded slice of lines, a whole file, or neither.
Asked = Literal["slice", "file"] | None

_ARG_KEYS = ("command", "cmd", "script", "input")
_SEPARATORS = frozenset({";", "&&", "||", "&", "\n"})
#: Commands that print nothing the agent reads (a chain may start with them).
_SILENT = frozenset({"cd", "pushd", "export", "set", "true", "source", "."})
_SHELLS = frozenset({"bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash"})


def command_text(arguments: Any) -> str | None:
    """The shell command of a tool call's arguments: a string, a JSON object text or a
    mapping with ``command``/``cmd``/``script``/``input``, or an argv list
    (``["bash", "-lc", "…"]``: its last item). None when there is none."""
    args = arguments
    if isinstance(args, str):
        s = args.lstrip()
        if not s.startswith("{"):
            return args
        if len(s) > 4 * MAX_COMMAND:
            return None
        try:
            args = json.loads(s)
        except (ValueError, RecursionError):
            return None
    if isinstance(args, Mapping):
        for key in _ARG_KEYS:
            val = args.get(key)
            if isinstance(val, str):
                return val
            if isinstance(val, list):
                return _argv(val)
        return None
    if isinstance(args, list):
        return _argv(args)
    return None


def _argv(items: list[Any]) -> str | None:
    if not items or len(items) > 64 or not all(isinstance(x, str) for x in items):
        return None
    if items[0] in _SHELLS and len(items) >= 3 and items[-2] in ("-c", "-lc"):
        return str(items[-1])
    return " ".join(items)


def _tokens(command: str) -> list[str] | None:
    """Words and operators (``|``, ``;``, ``&&``, ``||``, ``&``, newline) of a command,
    quotes removed; None for what this parse does not follow. One pass."""
    out: list[str] = []
    word: list[str] = []
    in_word = False
    i, n = 0, len(command)
    while i < n:
        c = command[i]
        if c == "'":
            j = command.find("'", i + 1)
            if j < 0:
                return None
            word.append(command[i + 1 : j])
            in_word = True
            i = j + 1
            continue
        if c == '"':
            j = i + 1
            while j < n and command[j] != '"':
                if command[j] in "$`":
                    return None
                if command[j] == "\\" and j + 1 < n:
                    j += 1
                word.append(command[j])
                j += 1
            if j >= n:
                return None
            in_word = True
            i = j + 1
            continue
        if c == "\\":
            if i + 1 < n and command[i + 1] != "\n":
                word.append(command[i + 1])
                in_word = True
            i += 2
            continue
        if c in "$`()<{}":
            # substitutions, subshells, groups, input redirections, here-documents
            return None
        if c == ">" and in_word and word == ["2"]:
            # stderr elsewhere (2>/dev/null, 2>&1): what stdout prints is unchanged
            word.clear()
            in_word = False
            i += 2 if command.startswith(">&", i) else 1
            while i < n and command[i] in " \t":
                i += 1
            while i < n and command[i] not in " \t\r\n|;&<>()$`'\"\\":
                i += 1
            continue
        if c in " \t\r\n|;&>":
            if in_word:
                out.append("".join(word))
                word.clear()
                in_word = False
            if c == "\n" or c == ";":
                out.append(c)
            elif c in "|&":
                if i + 1 < n and command[i + 1] == c:
                    out.append(c + c)
                    i += 1
                else:
                    out.append(c)
            elif c == ">":
                out.append(">")
            i += 1
            continue
        word.append(c)
        in_word = True
        i += 1
    if in_word:
        out.append("".join(word))
    return out


def _number(s: str) -> bool:
    return 0 < len(s) <= 9 and s.isascii() and s.isdigit()


def _sed_script(s: str) -> bool:
    """``A,Bp`` / ``Ap`` / ``A,+Np`` items separated by ``;`` (numbers only)."""
    items = [x.strip() for x in s.split(";")]
    items = [x for x in items if x]
    if not items or len(items) > 16:
        return False
    for item in items:
        if not item.endswith("p"):
            return False
        a, _, b = item[:-1].partition(",")
        if not _number(a.strip()):
            return False
        b = b.strip()
        if b.startswith("+"):
            b = b[1:]
        if b and not _number(b):
            return False
    return True


def _sed(args: list[str]) -> bool:
    quiet = False
    script: str | None = None
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-n", "--quiet", "--silent"):
            quiet = True
        elif a == "-e" and i + 1 < len(args):
            if script is not None:
                return False
            script = args[i + 1]
            i += 1
        elif a.startswith("-n") and len(a) > 2 and script is None:
            quiet, script = True, a[2:]
        elif a.startswith("-"):
            return False
        elif script is None:
            script = a
        i += 1
    return quiet and script is not None and _sed_script(script)


def _count_option(args: list[str], short: str, long: str) -> bool | None:
    """Whether the arguments bound a count: ``-n N``/``-nN``/``-N``/``--lines=N``
    (``short`` "n", ``long`` "--lines"); None when an option says otherwise (``+N``,
    ``-f``)."""
    bounded = False
    i = 0
    while i < len(args):
        a = args[i]
        value: str | None = None
        if a in (f"-{short}", long, "-c", "--bytes") and i + 1 < len(args):
            value = args[i + 1]
            i += 1
        elif a.startswith(f"-{short}") and len(a) > 2:
            value = a[2:]
        elif a.startswith(f"{long}=") or a.startswith("--bytes="):
            value = a.partition("=")[2]
        elif a.startswith("-") and _number(a[1:]):
            value = a[1:]
        elif a.startswith("-") and a != "-":
            return None
        if value is not None:
            if not _number(value):
                return None
            bounded = True
        i += 1
    return bounded


def _stage(words: list[str]) -> Asked:
    """What one pipeline's last stage asks for (``None``: nothing bounded)."""
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1]
    args = words[1:]
    if name == "sed":
        return "slice" if _sed(args) else None
    if name == "head":
        # head alone prints 10 lines
        return "slice" if _count_option(args, "n", "--lines") is not None else None
    if name == "tail":
        return "slice" if _count_option(args, "n", "--lines") else None
    if name in ("grep", "egrep", "fgrep", "rg"):
        for i, a in enumerate(args):
            if a in ("-m", "--max-count") and i + 1 < len(args) and _number(args[i + 1]):
                return "slice"
            if a.startswith("--max-count=") and _number(a.partition("=")[2]):
                return "slice"
            if a.startswith("-m") and _number(a[2:]):
                return "slice"
        return None
    return None


def _read(words: list[str]) -> bool:
    """A single-stage read of one file: ``cat [-n] F``, ``nl [-ba] F``."""
    if not words or words[0].rsplit("/", 1)[-1] not in ("cat", "nl"):
        return False
    files = [a for a in words[1:] if not a.startswith("-")]
    return len(files) == 1 and all(len(a) <= 4 for a in words[1:] if a.startswith("-"))


def asked_slice(command: str) -> Asked:
    """``"slice"`` when every part of ``command`` that prints is a bounded slice (the
    last stage of its pipeline is ``sed -n 'A,Bp'``, ``head``, ``tail -n N`` or
    ``grep -m N``), ``"file"`` when one part is a plain read of one file and the rest
    slices, None otherwise (redirected output, a command it does not know)."""
    if len(command) > MAX_COMMAND:
        return None
    tokens = _tokens(command)
    if not tokens:
        return None
    found: Asked = None
    segment: list[list[str]] = [[]]
    for tok in [*tokens, ";"]:
        if tok == "|":
            segment.append([])
        elif tok in _SEPARATORS:
            if segment != [[]]:
                kind = _pipeline(segment)
                if kind is None:
                    return None
                if kind != "silent" and found != "file":
                    found = kind
            segment = [[]]
        else:
            segment[-1].append(tok)
    return found


def _pipeline(stages: list[list[str]]) -> Literal["slice", "file", "silent"] | None:
    if any(not s or ">" in s for s in stages):
        return None
    if len(stages) == 1 and stages[0][0] in _SILENT:
        return "silent"
    kind = _stage(stages[-1])
    if kind is not None:
        return kind
    if len(stages) == 1 and _read(stages[0]):
        return "file"
    return None
