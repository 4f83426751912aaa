"""The compiled yes/no schema check agrees with ``jsonschema.Draft7Validator.is_valid``."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.validators import Draft7Validator

from ctxpolicy.policy.load import load_document
from ctxpolicy.policy.schemacheck import Unsupported, compile_schema, json_equal
from ctxpolicy.resolve import schema as sch
from tests.conftest import DATA, REPO

FILES = sorted(
    p
    for base in (
        REPO / "policies",
        DATA / "valid",
        DATA / "invalid",
        REPO / "tests" / "cli" / "data",
    )
    if base.is_dir()
    for p in base.rglob("*")
    if p.suffix in (".yaml", ".yml", ".toml") and ".expected." not in p.name
)


@pytest.fixture(scope="module", params=[False, True], ids=["builtin", "plugins"])
def schemas(request: pytest.FixtureRequest) -> tuple[Any, Draft7Validator]:
    schema = sch.build_schema(plugins=request.param)
    return compile_schema(schema), Draft7Validator(schema)


def _data(path: Path) -> Any:
    doc, _ = load_document(path)
    return None if doc is None else doc.data


#: The corpus files that parse into a document (the others are syntax-error cases).
PARSED = [p for p in FILES if _data(p) is not None]


def test_corpus_has_files() -> None:
    assert len(FILES) > 100 and len(PARSED) > len(FILES) // 2


@pytest.mark.parametrize("path", PARSED, ids=lambda p: str(p.relative_to(REPO)))
def test_agrees_with_jsonschema_on_corpus(path: Path, schemas: tuple[Any, Draft7Validator]) -> None:
    check, validator = schemas
    data = _data(path)
    assert check(data) == validator.is_valid(data)


def test_corpus_exercises_both_answers(schemas: tuple[Any, Draft7Validator]) -> None:
    check, _ = schemas
    answers = {check(d) for d in (_data(p) for p in FILES) if d is not None}
    assert answers == {True, False}


# --------------------------------------------------------------------------- mutations

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=200_000),
    st.sampled_from([0.0, 0.5, 1.0, 2.0, -1.0, 0.95, 1e9, float("inf")]),
    st.sampled_from(
        [
            "",
            "25%",
            "x%",
            "warning",
            "error",
            "normal",
            "critical",
            "overflow",
            "always",
            "head_tail",
            "local",
            "emergency",
            "summarize",
            "extractive",
            "o200k_base",
            " ",
        ]
    ),
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.sampled_from(["layer", "options", "at", "x", "max_chars"])
    return st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3)


_VALUES = st.recursive(_SCALARS, _containers, max_leaves=6)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _set(root: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    node = root
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return root


_BASES = [d for d in (_data(p) for p in (REPO / "policies").glob("*.yaml")) if d is not None]
_BASES += [d for d in (_data(p) for p in sorted((DATA / "valid").glob("*.yaml"))[:6]) if d]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_agrees_with_jsonschema_on_mutated_documents(data: st.DataObject) -> None:
    schema = sch._cached_schema(True)
    check = sch._cached_check(True)
    assert check is not None
    validator = Draft7Validator(schema)
    doc = copy.deepcopy(data.draw(st.sampled_from(_BASES)))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(_paths(doc)))
        if data.draw(st.booleans()) and path and isinstance(doc, dict):
            parent = doc
            for p in path[:-1]:
                parent = parent[p]
            if isinstance(parent, dict):
                parent[data.draw(st.sampled_from(["x", "extra", "options", "enabled"]))] = (
                    data.draw(_VALUES)
                )
                continue
        doc = _set(doc, path, data.draw(_VALUES))
    assert check(doc) == validator.is_valid(doc)


# --------------------------------------------------------------------------- semantics


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        ({"type": "integer"}, 1.0),
        ({"type": "integer"}, True),
        ({"type": "integer"}, 2.5),
        ({"type": "number"}, False),
        ({"type": ["string", "null"]}, None),
        ({"const": 1}, True),
        ({"const": True}, True),
        ({"const": [1, {"a": False}]}, [1, {"a": 0}]),
        ({"enum": ["a", 1]}, 1.0),
        ({"enum": ["a", 1]}, True),
        ({"minimum": 0}, "text"),
        ({"exclusiveMinimum": 0}, 0),
        ({"maximum": 1, "exclusiveMaximum": 1}, 1),
        ({"pattern": "^a"}, "ba"),
        ({"pattern": "a"}, "ba"),
        ({"maxLength": 2, "minLength": 1}, "abc"),
        ({"items": {"type": "string"}, "minItems": 1}, []),
        ({"items": [{"type": "string"}]}, ["a", 1]),
        ({"required": ["a"], "additionalProperties": False, "properties": {"a": {}}}, {"a": 1}),
        ({"additionalProperties": {"type": "integer"}}, {"a": 1, "b": "x"}),
        ({"if": {"properties": {"a": {"const": 1}}}, "then": {"required": ["b"]}}, {"a": 1}),
        ({"allOf": [{"type": "object"}, {"required": ["a"]}]}, {}),
        ({"anyOf": [{"type": "null"}, {"minimum": 3}]}, 2),
        # Draft 7: keywords beside $ref are ignored
        (
            {"definitions": {"S": {"type": "string"}}, "$ref": "#/definitions/S", "minLength": 5},
            "a",
        ),
        (False, 1),
        (True, 1),
    ],
)
def test_keyword_semantics_match_jsonschema(schema: Any, instance: Any) -> None:
    assert compile_schema(schema if isinstance(schema, dict) else {"anyOf": [schema]})(
        instance
    ) == Draft7Validator(schema).is_valid(instance)


def test_recursive_definitions() -> None:
    schema = {
        "definitions": {
            "Tree": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/definitions/Tree"}}},
                "additionalProperties": False,
            }
        },
        "$ref": "#/definitions/Tree",
    }
    check = compile_schema(schema)
    assert check({"kids": [{"kids": []}, {}]})
    assert not check({"kids": [{"kids": [{"x": 1}]}]})


@pytest.mark.parametrize(
    "schema",
    [
        {"not": {"type": "string"}},
        {"oneOf": [{}]},
        {"patternProperties": {"^x": {}}},
        {"$ref": "other.json#/definitions/A"},
        {"$ref": "#/definitions/Missing"},
        {"type": "decimal"},
    ],
)
def test_unsupported_schema_raises(schema: dict[str, Any]) -> None:
    with pytest.raises(Unsupported):
        compile_schema(schema)


def test_json_equal() -> None:
    assert json_equal(1, 1.0) and not json_equal(1, True) and not json_equal(0, False)
    assert json_equal({"a": [1]}, {"a": [1.0]}) and not json_equal({"a": 1}, {"b": 1})
    assert not json_equal([1, 2], [1]) and not json_equal("1", 1)
