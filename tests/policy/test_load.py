"""Loader: plain data, positions, hostile-input limits; never raises."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from ctxpolicy.policy.load import MAX_NODES, load_document
from ctxpolicy.policy.readfile import Abort
from ctxpolicy.policy.source import SourceMap


def _load(text: str | bytes, name: str = "p.yaml"):
    doc, diags = load_document(name, text=text)
    return doc, [d.format() for d in diags]


def test_yaml_plain_data_and_positions() -> None:
    doc, diags = _load(
        "ctxpolicy: 1\npolicies:\n  default:\n    pipeline:\n      - {layer: x, at: error}\n      - layer: y\n"
    )
    assert diags == []
    assert doc is not None and doc.format == "yaml"
    assert doc.data == {
        "ctxpolicy": 1,
        "policies": {"default": {"pipeline": [{"layer": "x", "at": "error"}, {"layer": "y"}]}},
    }
    sm = doc.source_map
    assert sm.position(("policies", "default", "pipeline")) == (4, 5)
    assert sm.position(("policies", "default", "pipeline", 0, "at")) == (5, 20)
    assert sm.value_position(("policies", "default", "pipeline", 0, "at")) == (5, 24)
    assert sm.position(("policies", "default", "pipeline", 1, "layer")) == (6, 9)
    # unknown paths: nearest known ancestor, then (1, 1)
    assert sm.position(("policies", "default", "pipeline", 1, "nope", 3)) == (6, 9)
    assert SourceMap().position(("x",)) == (1, 1)


def test_yaml_core_schema_scalars() -> None:
    doc, _ = _load(
        "a: yes\nb: 0x1f\nc: 1_000\nd: ~\ne: '1'\nf: 2024-01-01\ng: -2.5\nh: True\ni: 1e3\n"
    )
    assert doc is not None
    assert doc.data == {
        "a": "yes",
        "b": 31,
        "c": "1_000",
        "d": None,
        "e": "1",
        "f": "2024-01-01",
        "g": -2.5,
        "h": True,
        "i": 1000.0,
    }


def test_aliases_are_copies_within_limits() -> None:
    doc, diags = _load("a: &x {k: [1, 2]}\nb: *x\n")
    assert diags == []
    assert doc is not None and doc.data["a"] == doc.data["b"]
    assert doc.data["a"] is not doc.data["b"]


def test_alias_bomb_is_bounded() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    doc, diags = _load("\n".join(lines) + "\n")
    assert doc is None
    assert len(diags) == 1 and f"alias expansion exceeds {MAX_NODES} nodes" in diags[0]


@pytest.mark.parametrize(
    "src",
    [
        "a: !!python/object/apply:os.system ['touch /tmp/pwned']\n",
        "a: !!python/object/new:os.system [x]\n",
        "a: !!binary aGVsbG8=\n",
        "a: !custom {x: 1}\n",
        "!!map {a: 1}\n",
    ],
)
def test_tags_are_never_constructed(src: str) -> None:
    _, diags = _load(src)
    assert any(" CTX003 " in d for d in diags)


def test_bom_accepted_and_other_encodings_rejected() -> None:
    doc, diags = _load(codecs.BOM_UTF8 + b"a: 1\n")
    assert diags == [] and doc is not None and doc.data == {"a": 1}
    for raw in (
        "a: 1\n".encode("utf-16"),
        "a: 1\n".encode("utf-32"),
        b"a: \x93x\x94\n",
        b"a: 1\x00",
    ):
        doc, diags = _load(raw)
        assert doc is None and " CTX005 " in diags[0]


def test_toml_positions_with_arrays_of_tables_and_dotted_keys() -> None:
    text = (
        'ctxpolicy = 1\n[policies.default]\nmodel = "m"\nbudget = {window = 5, target = 0.5}\n'
        '[[policies.default.pipeline]]\nlayer = "x"\noptions.max = 3\n'
        '[[policies.default.pipeline]]\nlayer = "y"\n[policies.default.tools."*"]\npreprocess = "h"\n'
    )
    doc, diags = _load(text, "p.toml")
    assert diags == [] and doc is not None and doc.format == "toml"
    sm = doc.source_map
    assert sm.position(("policies", "default", "budget", "target")) == (4, 23)
    assert sm.position(("policies", "default", "pipeline", 0, "options", "max")) == (7, 9)
    assert sm.position(("policies", "default", "pipeline", 1, "layer")) == (9, 1)
    assert sm.position(("policies", "default", "tools", "*", "preprocess")) == (11, 1)


def test_toml_datetimes_are_kept_for_type_errors() -> None:
    doc, _ = _load("w = 1979-05-27\n", "p.toml")
    assert doc is not None
    assert type(doc.data["w"]).__name__ == "date"


def test_toml_errors_have_positions() -> None:
    _, diags = _load("a = 1\nb = [\n", "p.toml")
    assert diags[0].startswith("p.toml:3:1: CTX001 invalid TOML")


@pytest.mark.parametrize(
    "blob",
    [
        bytes(range(256)),
        b"\xff" * 100,
        b"{{{{",
        b"[" * 5000,
        b"- - - -",
        b"\t\t:",
        b"%YAML 9.9\n---\na: 1",
    ],
)
def test_garbage_never_raises(blob: bytes) -> None:
    for name in ("g.yaml", "g.toml"):
        doc, diags = load_document(name, text=blob)
        assert doc is not None or diags


def _yaml_corpus() -> list[Path]:
    root = Path(__file__).resolve().parents[2]
    files: list[Path] = []
    for base in ("tests/data", "tests/cli/data", "policies", "examples", "docs"):
        files += [p for p in (root / base).rglob("*") if p.suffix in (".yaml", ".yml")]
    return sorted(files)


@pytest.mark.parametrize("path", _yaml_corpus(), ids=lambda p: p.name)
def test_fast_yaml_path_agrees_with_round_trip_parser(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """libyaml reads a clean file into exactly what the round-trip parser reads; any file
    it is not sure about goes to the round-trip parser (so the diagnostics are its)."""
    from ctxpolicy.policy import load_yaml as load_mod

    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return
    try:
        load_mod._flow_depth_scan(str(path), text)  # runs before either parser
    except Abort:
        return
    fast = load_mod._load_yaml_fast(str(path), text)
    if fast is None:
        return
    monkeypatch.setattr(load_mod, "FAST_YAML", False)
    data, smap, diags, dropped = load_mod._load_yaml(str(path), text)
    assert (fast[2], fast[3]) == (diags, dropped)
    assert fast[0] == data
    if not diags:
        assert fast[1].keys == smap.keys
        assert fast[1].values == smap.values


def test_fast_yaml_path_is_used_for_clean_files() -> None:
    from ctxpolicy.policy import load_yaml as load_mod

    text = Path(__file__).resolve().parents[2].joinpath("policies/agents.yaml").read_text()
    assert load_mod._load_yaml_fast("agents.yaml", text) is not None
    assert load_mod._load_yaml_fast("x.yaml", "a: !!python/name:os.system x\n") is None
    assert load_mod._load_yaml_fast("x.yaml", "a: 1\na: 2\n") is None
