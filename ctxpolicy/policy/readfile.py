"""Reading a policy file's bytes: regular files only, never blocking, bounded, and
decoded as UTF-8 text with a diagnostic (line:col) for anything else. Used by
:func:`ctxpolicy.policy.load.load_document`."""

from __future__ import annotations

import codecs
import os
import re
import stat

from ctxpolicy.policy.diagnostics import Diagnostic, make

__all__ = ["MAX_BYTES", "Abort", "decode", "read_regular", "too_large"]

MAX_BYTES = 1024 * 1024


class Abort(Exception):
    """Stop reading: ``diag`` says why."""

    def __init__(self, diag: Diagnostic) -> None:
        super().__init__(diag.message)
        self.diag = diag


def _line_col(raw: bytes, index: int) -> tuple[int, int]:
    line = raw.count(b"\n", 0, index) + 1
    start = raw.rfind(b"\n", 0, index) + 1
    col = len(raw[start:index].decode("utf-8", errors="replace")) + 1
    return line, col


_CONTROL_RE = re.compile("[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")


def decode(name: str, raw: bytes) -> str:
    hint = "save the file as UTF-8 (without NUL bytes)"
    for bom, enc in (
        (codecs.BOM_UTF32_LE, "UTF-32"),
        (codecs.BOM_UTF32_BE, "UTF-32"),
        (codecs.BOM_UTF16_LE, "UTF-16"),
        (codecs.BOM_UTF16_BE, "UTF-16"),
    ):
        if raw.startswith(bom):
            raise Abort(
                make(
                    name,
                    (1, 1),
                    "CTX005",
                    f"file is {enc}-encoded; policy files must be UTF-8",
                    hint,
                )
            )
    if raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise Abort(
            make(
                name,
                _line_col(raw, nul),
                "CTX005",
                "NUL byte in file (binary data or UTF-16 without BOM?); policy files must be UTF-8 text",
                hint,
            )
        )
    try:
        text = raw.decode("utf-8")
        m = _CONTROL_RE.search(text)
        if m is not None:
            line = text.count("\n", 0, m.start()) + 1
            col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
            raise Abort(
                make(
                    name,
                    (line, col),
                    "CTX005",
                    f"control character U+{ord(m.group(0)):04X} in file; policy files are plain text",
                    "remove the character (tabs, CR and LF are fine)",
                )
            )
    except UnicodeDecodeError as exc:
        bad = raw[exc.start : exc.start + 1].hex()
        raise Abort(
            make(
                name,
                _line_col(raw, exc.start),
                "CTX005",
                f"invalid UTF-8 byte 0x{bad} (is the file Windows-1252 or Latin-1?); "
                "policy files must be UTF-8",
                hint,
            )
        ) from None
    return text


def _file_kind(mode: int) -> str:
    for test, word in (
        (stat.S_ISFIFO, "a named pipe (FIFO)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return word
    return "not a regular file"


def _not_regular(name: str, mode: int) -> Diagnostic:
    return make(
        name,
        (1, 1),
        "CTX010",
        f"is {_file_kind(mode)}, not a regular file; only regular files are read",
        "give the path of a policy file",
    )


def read_regular(name: str) -> bytes | Diagnostic:
    """The bytes of ``name`` if it is a regular file (at most MAX_BYTES + 1).

    Opened without blocking and checked on the open descriptor, so a FIFO, a device
    or a directory (also one swapped in after a check) is a diagnostic, never a hang.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(name, flags)
    except FileNotFoundError:
        return make(name, (1, 1), "CTX010", "file not found")
    except IsADirectoryError:
        return make(name, (1, 1), "CTX010", "is a directory, not a policy file")
    except OSError as exc:
        try:  # a socket cannot even be opened: say what it is
            mode = os.stat(name).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            return _not_regular(name, mode)
        return make(name, (1, 1), "CTX010", f"cannot read file: {exc.strerror or exc}")
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return make(name, (1, 1), "CTX010", "is a directory, not a policy file")
        if not stat.S_ISREG(st.st_mode):
            return _not_regular(name, st.st_mode)
        if st.st_size > MAX_BYTES:
            return too_large(name, st.st_size)
        chunks: list[bytes] = []
        left = MAX_BYTES + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        return make(name, (1, 1), "CTX010", f"cannot read file: {exc.strerror or exc}")
    finally:
        os.close(fd)


def too_large(name: str, size: int) -> Diagnostic:
    return make(
        name,
        (1, 1),
        "CTX006",
        f"file is {size} bytes; policy files are limited to {MAX_BYTES} bytes (1 MiB)",
        "a policy file is small; split it with `include:`",
    )
