"""The bad-policy corpus: every file in tests/data/invalid yields exactly its expected text.

Convention: each ``tests/data/invalid/<case>.yaml|toml`` has ``<case>.expected.txt``
beside it with ``Diagnostic.format()`` of every diagnostic, sorted, paths relative
to the repository root (tests run with the repository as working directory).
Files in ``_inc/`` are only included by cases. Huge and deep inputs are generated
at run time (never committed). Regenerate an expected file only after reading it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxpolicy.policy.diagnostics import CODES, PolicyError
from ctxpolicy.policy.load import MAX_BYTES
from ctxpolicy.resolve.load import list_agents, load_policy, resolve_all, validate_file
from tests.conftest import DATA, POLICY_ENV, REPO

INVALID = sorted(p for p in (DATA / "invalid").iterdir() if p.suffix in (".yaml", ".toml"))
VALID = sorted(p for p in (DATA / "valid").iterdir() if p.suffix in (".yaml", ".toml"))
TIME_LIMIT = 2.0


@pytest.fixture(scope="module", autouse=True)
def _builtin_plugins_only() -> Iterator[None]:
    """The corpus is what a user of a plain install sees: built-in plugins only (the dev
    setup's example plugin must not appear in hints or in docs/diagnostics.md)."""
    from ctxpolicy import plugins

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(plugins.ENV_ALLOWLIST, "")
        plugins.reset()
        plugins.get_registry()  # plugin imports are not part of the per-file time
        yield
    plugins.reset()


def _run(path: str, **kw: object) -> tuple[str, list, float]:
    t0 = time.perf_counter()
    diags = validate_file(path, env=POLICY_ENV, **kw)  # type: ignore[arg-type]
    elapsed = time.perf_counter() - t0
    return "\n".join(d.format() for d in diags), diags, elapsed


def test_corpus_is_big_enough() -> None:
    assert len(INVALID) >= 120
    assert {p.suffix for p in INVALID} == {".yaml", ".toml"}
    stems = [p.stem for p in INVALID]
    assert len(stems) == len(set(stems)), "case names must be unique across .yaml/.toml"


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.name)
def test_invalid_case(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    rel = path.relative_to(REPO).as_posix()
    text, diags, elapsed = _run(rel)
    expected = path.with_name(path.stem + ".expected.txt").read_text(encoding="utf-8")
    assert text == expected.rstrip("\n")
    assert diags, "every invalid case yields a diagnostic"
    assert all(d.line >= 1 and d.col >= 1 for d in diags)
    assert elapsed < TIME_LIMIT
    if any(d.severity == "error" for d in diags):
        with pytest.raises(PolicyError):
            for agent in list_agents(rel) or ["default"]:
                load_policy(rel, agent, env=POLICY_ENV)


@pytest.mark.parametrize("path", VALID, ids=lambda p: p.name)
def test_valid_case(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    rel = path.relative_to(REPO).as_posix()
    text, _, elapsed = _run(rel)
    assert text == ""
    assert elapsed < TIME_LIMIT
    policies, diags = resolve_all(rel, env=POLICY_ENV)
    assert diags == []
    assert sorted(policies) == sorted(list_agents(rel))


# ------------------------------------------------------------------ generated at run time


def _generated(tmp: Path) -> dict[str, tuple[Path, str]]:
    cases: dict[str, tuple[Path, str]] = {}

    def add(case: str, name: str, content: str | bytes, where: str, message: str) -> None:
        path = tmp / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        cases[case] = (path, f"<tmp>/{name}:{where}: " + message.format(size=path.stat().st_size))

    too_big = (
        "CTX006 file is {size} bytes; policy files are limited to "
        f"{MAX_BYTES} bytes (1 MiB)\n    hint: a policy file is small; split it with `include:`"
    )
    too_deep = (
        "CTX008 nesting deeper than 64 levels\n"
        "    hint: policy files are shallow; flatten the structure"
    )
    add(
        "2 MiB",
        "big_2mib.yaml",
        b"ctxpolicy: 1\n" + b"# padding\n" * (2 * 1024 * 1024 // 10),
        "1:1",
        too_big,
    )
    add("5 MiB", "big_5mib.toml", b"ctxpolicy = 1\n" + b"x" * (5 * 1024 * 1024), "1:1", too_big)
    add(
        "10k flow levels",
        "deep_10k.yaml",
        "ctxpolicy: 1\nx: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "2:68",
        too_deep,
    )
    add(
        "10k flow mappings",
        "deep_10k_map.yaml",
        "ctxpolicy: 1\nx: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
        "2:260",
        too_deep,
    )
    add(
        "70 block levels",
        "deep_block.yaml",
        "ctxpolicy: 1\n" + "".join(" " * i + "a:\n" for i in range(70)) + " " * 70 + "a: 1\n",
        "66:65",
        too_deep,
    )
    add(
        "10k TOML levels",
        "deep_10k.toml",
        "ctxpolicy = 1\nx = " + "[" * 10_000 + "]" * 10_000 + "\n",
        "1:1",
        too_deep,
    )
    cases["missing file"] = (tmp / "nope.yaml", "<tmp>/nope.yaml:1:1: CTX010 file not found")
    cases["directory"] = (tmp, "<tmp>:1:1: CTX010 is a directory, not a policy file")
    return cases


GENERATED = [
    "2 MiB",
    "5 MiB",
    "10k flow levels",
    "10k flow mappings",
    "70 block levels",
    "10k TOML levels",
    "missing file",
    "directory",
]


@pytest.mark.parametrize("name", GENERATED)
def test_generated_case(name: str, tmp_path: Path) -> None:
    path, expected = _generated(tmp_path)[name]
    text, diags, elapsed = _run(str(path))
    assert text.replace(str(tmp_path), "<tmp>") == expected
    assert elapsed < TIME_LIMIT
    assert all(d.severity == "error" for d in diags)


def test_exactly_one_mib_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "one_mib.yaml"
    head = b"ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 8000}\n    budget: {reserve_output: 1000}\n"
    pad = b"# padding comment line\n"
    body = head + pad * ((MAX_BYTES - len(head)) // len(pad))
    body += b"#" * (MAX_BYTES - len(body) - 1) + b"\n"
    path.write_bytes(body)
    assert path.stat().st_size == MAX_BYTES
    text, _, elapsed = _run(str(path))
    assert text == ""
    # the pure-Python YAML scanner reads ~1 MiB/s; allow for a loaded CI machine
    assert elapsed < 3 * TIME_LIMIT


def test_unknown_agent_requested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    text, _, _ = _run("tests/data/valid/design_example.yaml", agent="code_reviewer")
    assert text == (
        "tests/data/valid/design_example.yaml:1:1: CTX308 no agent 'code_reviewer' in this file "
        "(did you mean 'code_review_agent'?)\n    hint: agents: default, code_review_agent"
    )


def test_every_code_is_exercised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: set[str] = set()
    for path in INVALID:
        text = path.with_name(path.stem + ".expected.txt").read_text(encoding="utf-8")
        seen.update(word for word in text.split() if word.startswith("CTX") and word[3:].isdigit())
    for _, expected in _generated(tmp_path).values():
        seen.update(w for w in expected.split() if w.startswith("CTX"))
    seen.add("CTX308")  # test_unknown_agent_requested
    seen.add("CTX000")  # tests/resolve/test_load.py::test_internal_error_becomes_diagnostic
    seen.add("CTX309")  # tests/security/test_policy_limits.py (needs a 100 KB variable)
    mine = {c for c in CODES if not c.startswith("CTX15")}  # CTX15x: JSON Schema validator
    assert mine - seen == set()


def test_docs_describe_every_code_with_real_examples() -> None:
    import re

    doc = (REPO / "docs" / "diagnostics.md").read_text(encoding="utf-8")
    for code, (severity, _) in CODES.items():
        if code.startswith("CTX15"):  # JSON Schema codes, documented as a group
            assert "CTX150–CTX156" in doc
            continue
        section = doc.split(f"## {code}\n", 1)
        assert len(section) == 2, f"docs/diagnostics.md lacks a section for {code}"
        body = section[1].split("\n## ", 1)[0]
        assert f"({severity})" in body.split("\n\n")[0]
    for src, block in re.findall(r"Example \(`([^`]+)`\):\n\n```\n(.*?)\n```", doc, re.S):
        expected = (REPO / src).with_name(Path(src).stem + ".expected.txt")
        assert block in expected.read_text(encoding="utf-8"), src
