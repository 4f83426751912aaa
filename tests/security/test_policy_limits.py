"""Issue 19 items 12–14: hostile inputs to ``ctxpolicy validate`` are ordinary diagnostics.

* 12 — a FIFO, a device, a socket or a directory given as the policy (or reached
  through ``include:`` or a symlink) is reported without reading it: never a hang;
* 13 — ``${BIG}`` repeated in a file cannot amplify memory: the interpolated size is
  bounded, the excess is a CTX309 at its line:col (named by ``${BIG}``, not its value);
* 14 — a 5,000-digit integer, ``1e999``, ``.nan``, ``.inf`` (TOML ``inf``/``nan``) are
  CTX103 at their line:col, never CTX000.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxpolicy.policy.interp import MAX_INTERPOLATED
from ctxpolicy.resolve.load import validate_file

VALID = "ctxpolicy: 1\npolicies:\n  default:\n    model: gpt-4o\n"


def cli_validate(*paths: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxpolicy.cli", "validate", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=timeout,  # a blocked read fails the test instead of hanging it
    )


# --------------------------------------------------------------------------- item 12


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_is_reported_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    link = tmp_path / "link.yaml"
    link.symlink_to(fifo)
    for path in (fifo, link):
        proc = cli_validate(path)
        assert proc.returncode == 1, proc.stderr
        assert "CTX010 is a named pipe (FIFO), not a regular file" in proc.stdout
        assert "Traceback" not in proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_fifo_through_include_is_reported(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "shared.yaml")
    p = tmp_path / "p.yaml"
    p.write_text("ctxpolicy: 1\ninclude: [shared.yaml]\n" + VALID.split("\n", 1)[1])
    diags = validate_file(p)
    assert [(d.code, d.line) for d in diags] == [("CTX304", 2)]


def test_device_and_directory(tmp_path: Path) -> None:
    proc = cli_validate(Path("/dev/zero"), Path("/dev/null"))
    assert proc.returncode == 1
    assert proc.stdout.count("CTX010 is a character device, not a regular file") == 2
    inc = tmp_path / "p.yaml"
    (tmp_path / "dir.yaml").mkdir()
    inc.write_text("ctxpolicy: 1\ninclude: [dir.yaml, /dev/zero]\n")
    assert [d.code for d in validate_file(inc)] == ["CTX304", "CTX304"]


def test_socket_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        [d] = validate_file(path)
        assert d.code == "CTX010" and "socket" in d.message
    finally:
        sock.close()


# --------------------------------------------------------------------------- item 13


def test_interpolation_amplification_is_bounded(tmp_path: Path) -> None:
    """An 80 KB file repeating ${BIG} with a 100 KB variable: 1.6 GB before the fix."""
    big = "x" * 100_000
    lines = ["ctxpolicy: 1", "policies:", "  default:", "    model: gpt-4o", "    constraints:"]
    lines += ['      - "${BIG}${BIG}${BIG}${BIG}${BIG}${BIG}${BIG}${BIG}"'] * 2000
    p = tmp_path / "amp.yaml"
    p.write_text("\n".join(lines) + "\n")
    assert p.stat().st_size > 80_000
    validate_file(p, env={})  # imports and caches are not part of the measure
    tracemalloc.start()
    try:
        diags = validate_file(p, env={"BIG": big})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    [d] = [d for d in diags if d.code == "CTX309"]
    # the first substitution past the limit: 1 MiB / 100 KB = 10 fit, the 11th does not,
    # and substitutions run bottom-up (the last item first), 8 per line
    assert (d.line, d.col) == (p.read_text().count("\n") - 1, 9)
    assert "${BIG}" in d.message and big[:20] not in d.message
    # memory: a few times the bound, nowhere near 2000 × 8 × 100 KB = 1.6 GB
    assert peak < 40 * MAX_INTERPOLATED, peak


def test_many_small_values_add_up(tmp_path: Path) -> None:
    p = tmp_path / "many.toml"
    body = "".join(f'c{i} = "${{V}}"\n' for i in range(300))
    p.write_text(
        'ctxpolicy = 1\n[policies.default]\nmodel = "gpt-4o"\n[policies.default.x]\n' + body
    )
    diags = validate_file(p, env={"V": "v" * 5000})
    assert sum(d.code == "CTX309" for d in diags) == 1


# --------------------------------------------------------------------------- item 14

ODD = [
    ("9" * 5000, "an integer of 5000 digits is out of range"),
    ("-" + "9" * 5000, "an integer of 5000 digits is out of range"),
    ("9223372036854775808", "9223372036854775808 is out of range (integers are 64-bit)"),
    ("0x" + "f" * 40, "out of range"),
    ("0o" + "7" * 40, "out of range"),
    ("1e999", "1e999 is out of range (too large for a number)"),
    ("-1e999", "-1e999 is out of range (too large for a number)"),
    (".inf", ".inf is not a finite number"),
    ("-.inf", "-.inf is not a finite number"),
    (".nan", ".nan is not a finite number"),
]


@pytest.mark.parametrize(("literal", "words"), ODD, ids=[w[:12] for w, _ in ODD])
@pytest.mark.parametrize("field", ["budget: {window: %s}", "thresholds: {warning: %s}"])
def test_odd_yaml_numbers(tmp_path: Path, literal: str, words: str, field: str) -> None:
    p = tmp_path / "n.yaml"
    p.write_text(VALID + "    " + (field % literal) + "\n")
    diags = validate_file(p, json_schema=True)
    assert [d.code for d in diags] == ["CTX103"], diags
    [d] = diags
    assert words in d.message
    assert (d.line, d.col) == (5, field.index("%s") + 5)
    assert len(d.message) < 200


@pytest.mark.parametrize(
    ("literal", "words"),
    [
        ("9" * 5000, "an integer of 5000 digits"),
        ("99999999999999999999", "an integer of 20 digits"),
        ("inf", "inf is not a finite number"),
        ("-inf", "-inf is not a finite number"),
        ("nan", "nan is not a finite number"),
        ("1e999", "inf is not a finite number"),
    ],
)
def test_odd_toml_numbers(tmp_path: Path, literal: str, words: str) -> None:
    p = tmp_path / "n.toml"
    p.write_text(
        'ctxpolicy = 1\n[policies.default]\nmodel = "gpt-4o"\n'
        f"[policies.default.budget]\nwindow = {literal}\n"
    )
    diags = validate_file(p, json_schema=True)
    assert [d.code for d in diags] == ["CTX103"], diags
    assert words in diags[0].message
    assert diags[0].line == 5 and diags[0].col == 10


def test_required_odd_number_is_one_diagnostic(tmp_path: Path) -> None:
    """A dropped required value is not also reported as missing."""
    p = tmp_path / "m.yaml"
    p.write_text("ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 1e999}\n")
    assert [d.code for d in validate_file(p, json_schema=True)] == ["CTX103"]


@settings(max_examples=40, deadline=None)
@given(digits=st.integers(min_value=20, max_value=20_000), sign=st.sampled_from(["", "-", "+"]))
def test_any_long_integer_is_an_ordinary_diagnostic(digits: int, sign: str) -> None:
    import tempfile

    literal = sign + "7" * digits
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in (
            ("p.yaml", VALID + f"    budget: {{safety_margin: {literal}}}\n"),
            (
                "p.toml",
                'ctxpolicy = 1\n[policies.default]\nmodel = "gpt-4o"\n'
                f"[policies.default.budget]\nsafety_margin = {literal}\n",
            ),
        ):
            p = Path(tmp) / name
            p.write_text(text)
            diags = validate_file(p, json_schema=True)
            assert diags and all(d.code == "CTX103" for d in diags), diags
            assert all(d.line == 5 for d in diags)
