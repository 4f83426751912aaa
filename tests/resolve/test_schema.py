"""The published JSON Schema: fresh, valid under draft-07 and 2020-12, with options."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import tomli
from jsonschema.validators import Draft7Validator, Draft202012Validator
from ruamel.yaml import YAML

from ctxpolicy import plugins as plugin_registry
from ctxpolicy.components import ComponentOptions, Layer
from ctxpolicy.plugins import hookimpl
from ctxpolicy.policy.diagnostics import Diagnostic
from ctxpolicy.resolve import schema as sch

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "schemas" / "ctxpolicy.schema.json"
VALIDATORS = [Draft7Validator, Draft202012Validator]


def _load(path: Path) -> Any:
    if path.suffix == ".toml":
        data = tomli.loads(path.read_text(encoding="utf-8"))
    else:
        data = YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8"))
    return json.loads(json.dumps(data))


def _native_files() -> list[Path]:
    files = sorted((ROOT / "policies").glob("*.y*ml")) + sorted((ROOT / "policies").glob("*.toml"))
    for sub in ("tests/data/valid", "tests/cli/data"):
        for p in sorted((ROOT / sub).glob("*")):
            if p.suffix in (".yaml", ".yml", ".toml") and ".expected." not in p.name:
                files.append(p)
    out = []
    for p in files:
        try:
            data = _load(p)
        except Exception:
            continue  # deliberately broken fixtures
        if isinstance(data, dict) and "ctxpolicy" in data and "invalid" not in p.parts:
            if p.parent.name == "data" and p.stem in ("unknown_key", "bad_option"):
                continue
            out.append(p)
    return out


def test_committed_schema_is_fresh() -> None:
    expected = sch.schema_text()
    actual = COMMITTED.read_text(encoding="utf-8") if COMMITTED.exists() else ""
    assert actual == expected, (
        f"{COMMITTED.relative_to(ROOT)} is stale; regenerate it with: {sch.REGENERATE}"
    )


def test_schema_header_and_definitions() -> None:
    s = sch.build_schema()
    assert s["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert s["$id"] == sch.SCHEMA_ID
    assert s["title"] and s["description"]
    assert "$defs" not in json.dumps(s)
    for name, sub in s["definitions"].items():
        assert "title" in sub or "description" in sub, name


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


def test_every_ref_resolves() -> None:
    s = sch.build_schema()
    refs = _refs(s)
    assert refs
    for ref in refs:
        assert ref.startswith("#/definitions/"), ref
        assert ref.removeprefix("#/definitions/") in s["definitions"], ref


@pytest.mark.parametrize("validator", VALIDATORS, ids=lambda v: v.__name__)
def test_schema_is_valid_under_metaschema(validator: Any) -> None:
    validator.check_schema(sch.build_schema())
    validator.check_schema(sch.build_schema(plugins=True))


def test_deterministic() -> None:
    assert sch.schema_text() == sch.schema_text()
    assert list(json.loads(sch.schema_text())) == sorted(json.loads(sch.schema_text()))


@pytest.mark.parametrize("path", _native_files(), ids=lambda p: str(p.relative_to(ROOT)))
@pytest.mark.parametrize("validator", VALIDATORS, ids=lambda v: v.__name__)
def test_shipped_and_valid_files_pass(path: Path, validator: Any) -> None:
    errors = [e.message for e in validator(sch.build_schema()).iter_errors(_load(path))]
    assert errors == []


def _doc(options: dict[str, Any], layer: str = "observation_mask") -> dict[str, Any]:
    return {
        "ctxpolicy": 1,
        "policies": {"a": {"pipeline": [{"layer": layer, "options": options}]}},
    }


@pytest.mark.parametrize("validator", VALIDATORS, ids=lambda v: v.__name__)
def test_builtin_layer_options_are_checked(validator: Any) -> None:
    if plugin_registry.get_registry().get("layer", "observation_mask") is None:
        pytest.skip("observation_mask not built yet")
    v = validator(sch.build_schema())
    assert list(v.iter_errors(_doc({"max_age_rounds": 5}))) == []
    bad = [x for e in v.iter_errors(_doc({"max_age_rounds": "five"})) for x in sch._leaf_errors(e)]
    assert bad and list(bad[0].absolute_path)[-2:] == ["options", "max_age_rounds"]
    typo = [x for e in v.iter_errors(_doc({"max_age_round": 5})) for x in sch._leaf_errors(e)]
    assert typo and typo[0].validator == "additionalProperties"


def test_null_deletes_inherited_keys() -> None:
    doc = {
        "ctxpolicy": 1,
        "policies": {"a": {"budget": {"safety_margin": None}, "tools": {"x": None}}},
    }
    for validator in VALIDATORS:
        assert list(validator(sch.build_schema()).iter_errors(doc)) == []


def test_default_component_applies_when_name_omitted() -> None:
    if plugin_registry.get_registry().get("preprocessor", "head_tail") is None:
        pytest.skip("head_tail not built yet")
    v = Draft7Validator(sch.build_schema())
    doc = {"ctxpolicy": 1, "policies": {"a": {"tools": {"*": {"options": {"max_chars": "x"}}}}}}
    assert list(v.iter_errors(doc)), "ToolRule without `preprocess` means head_tail"


# --------------------------------------------------------------------------- plugins


class _KeepOpts(ComponentOptions):
    keep_pattern: str = "error"
    """Regex of rounds to keep."""


class _KeepLayer(Layer):
    name: ClassVar[str] = "schema_test_keep"
    description: ClassVar[str] = "test layer"
    Options = _KeepOpts


class _Plugin:
    @hookimpl
    def ctxpolicy_register_layers(self, register: Any) -> None:
        register(_KeepLayer)


@pytest.fixture
def third_party() -> Any:
    name = plugin_registry.register_plugin(_Plugin(), name="schema-test-plugin")
    sch.clear_cache()
    yield name
    plugin_registry.unregister_plugin(name)
    sch.clear_cache()


@pytest.mark.parametrize("validator", VALIDATORS, ids=lambda v: v.__name__)
def test_plugins_flag_includes_third_party_options(third_party: str, validator: Any) -> None:
    with_plugins = sch.build_schema(plugins=True)
    without = sch.build_schema(plugins=False)
    assert "Layer_schema_test_keep_Options" in with_plugins["definitions"]
    assert "Layer_schema_test_keep_Options" not in without["definitions"]
    v = validator(with_plugins)
    assert list(v.iter_errors(_doc({"keep_pattern": "x"}, "schema_test_keep"))) == []
    assert list(v.iter_errors(_doc({"keep_patern": "x"}, "schema_test_keep")))
    # the built-in-only schema does not know its options (nor rejects the layer name)
    assert (
        list(validator(without).iter_errors(_doc({"keep_patern": "x"}, "schema_test_keep"))) == []
    )


def test_cli_schema_plugins_flag(third_party: str) -> None:
    from click.testing import CliRunner

    from ctxpolicy.cli import main

    out = CliRunner().invoke(main, ["schema", "--plugins"])
    assert out.exit_code == 0
    assert "Layer_schema_test_keep_Options" in json.loads(out.output)["definitions"]
    out = CliRunner().invoke(main, ["schema"])
    assert out.exit_code == 0 and "schema_test_keep" not in out.output


# --------------------------------------------------------------------------- diagnostics


class _SourceMap:
    """Positions of keys/items of a ruamel round-trip tree (1-based)."""

    def __init__(self, text: str) -> None:
        self.root = YAML().load(io.StringIO(text))

    def position(self, path: tuple[Any, ...]) -> tuple[int, int] | None:
        node, pos = self.root, (1, 1)
        for key in path:
            try:
                if isinstance(key, int):
                    line, col = node.lc.item(key)
                else:
                    line, col = node.lc.key(key)
                node = node[key]
            except (KeyError, IndexError, AttributeError, TypeError):
                return None
            pos = (line + 1, col + 1)
        return pos


@dataclass
class _Doc:
    path: str
    text: str
    data: Any = None
    source_map: Any = None
    format: str = "yaml"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.data = YAML(typ="safe", pure=True).load(self.text)
        self.source_map = _SourceMap(self.text)


TEXT = """\
ctxpolicy: 1
policies:
  default:
    model: {context_window: 32000}
    budgett: {target: 0.6}
    thresholds:
      warning: "high"
    pipeline:
      - layer: x
        at: never
"""


def test_schema_diagnostics_positions_and_codes() -> None:
    diags = sch.schema_diagnostics(_Doc("p.yaml", TEXT))
    by_code = {d.code: d for d in diags}
    unknown = by_code["CTX101"]
    assert (unknown.line, unknown.col) == (5, 5)
    assert "budgett" in unknown.message and unknown.hint == "did you mean 'budget'?"
    wrong_type = by_code["CTX103"]
    assert (wrong_type.line, wrong_type.col) == (7, 7)
    assert "policies.default.thresholds.warning" in wrong_type.message
    enum = by_code["CTX106"]
    assert (enum.line, enum.col) == (10, 9) and "warning" in (enum.hint or "")
    assert all(d.file == "p.yaml" and d.severity == "error" for d in diags)
    assert all(d.code in sch.SCHEMA_CODES for d in diags)


def test_schema_diagnostics_skip_compat_documents() -> None:
    doc = _Doc("c.yaml", "default:\n  total_window_tokens: 128000\n")
    assert sch.schema_diagnostics(doc) == []


def test_schema_diagnostics_missing_position_falls_back() -> None:
    doc = _Doc("p.yaml", "ctxpolicy: 1\npolicies: {a: {budget: {target: 5.5}}}\n")
    doc.source_map = None
    diags = sch.schema_diagnostics(doc)
    assert diags and all((d.line, d.col) == (1, 1) for d in diags)


def test_dedupe_prefers_pydantic_message() -> None:
    schema_d = Diagnostic("f", 5, 5, "CTX101", "error", "schema says")
    loader_d = Diagnostic("f", 5, 5, "CTX101", "error", "pydantic says")
    other_pos = Diagnostic("f", 7, 3, "CTX103", "error", "schema: wrong type")
    loader_pos = Diagnostic("f", 7, 3, "CTX102", "error", "unknown layer")
    only = Diagnostic("f", 9, 1, "CTX101", "error", "only schema")
    merged = sch.dedupe([loader_d, loader_pos, loader_d], [schema_d, other_pos, only, only])
    assert merged == [loader_d, loader_pos, only]


def _every_policy_file() -> list[Path]:
    out: list[Path] = []
    for base in ("tests/data/valid", "tests/data/invalid", "tests/cli/data", "policies"):
        out += [p for p in (ROOT / base).rglob("*") if p.suffix in (".yaml", ".yml", ".toml")]
    return sorted(p for p in out if ".expected." not in p.name)


@pytest.mark.parametrize("path", _every_policy_file(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_loader_error_means_no_schema_error(path: Path) -> None:
    """``validate`` runs the schema pass only for files with loader errors: that is sound
    only if a file the loader accepts is accepted by the schema too."""
    from ctxpolicy.policy.load import load_document
    from ctxpolicy.resolve.load import validate_file
    from tests.conftest import POLICY_ENV

    diags = validate_file(path, env=POLICY_ENV)
    if any(d.severity == "error" for d in diags):
        return
    doc, _ = load_document(path)
    assert doc is not None
    assert sch.schema_diagnostics(doc) == []
