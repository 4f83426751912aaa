"""Fuzzing: mutated valid policy files give diagnostics or a resolvable policy, never an exception.

Profiles: ``ci`` (default here, 300 examples; the lead tunes it) and ``fuzz`` (``make
fuzz``: ``HYPOTHESIS_PROFILE=fuzz``).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.policy.load import load_document
from ctxpolicy.resolve.load import list_agents, load_policy, validate_file
from tests.conftest import DATA, POLICY_ENV

# ci: 1,000 examples per test, 2,000 in all (issue 10); fuzz: `make fuzz`
for _name, _n in (("ci", 1000), ("fuzz", 10000)):
    try:
        settings.get_profile(_name)
    except Exception:  # InvalidArgument: not registered yet
        settings.register_profile(_name, max_examples=_n, deadline=None)
PROFILE = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
if os.environ.get("HYPOTHESIS_PROFILE") not in ("ci", "fuzz", None):  # another suite's profile
    PROFILE = settings.get_profile("ci")

SOURCES = sorted(p for p in (DATA / "valid").iterdir() if p.suffix in (".yaml", ".toml"))
SOURCES += sorted((DATA / "compat").iterdir())
BLOBS = [(p.suffix, p.read_bytes()) for p in SOURCES]

_scratch = tempfile.mkdtemp(prefix="ctxpolicy-fuzz-")
# included files of the valid corpus, so that includes resolve from the scratch dir
os.makedirs(os.path.join(_scratch, "_shared"), exist_ok=True)
Path(_scratch, "_shared", "base.yaml").write_bytes(
    (DATA / "valid" / "_shared" / "base.yaml").read_bytes()
)


def _check(suffix: str, content: bytes) -> None:
    path = os.path.join(_scratch, "case" + suffix)
    with open(path, "wb") as fh:
        fh.write(content)
    diags = validate_file(path, env=POLICY_ENV)
    assert isinstance(diags, list)
    for d in diags:
        assert d.line >= 1 and d.col >= 1 and d.code.startswith("CTX")
        assert d.code != "CTX000", d.format()
    if not any(d.severity == "error" for d in diags):
        for agent in list_agents(path):
            load_policy(path, agent, env=POLICY_ENV)  # resolvable: must not raise


@st.composite
def byte_mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    suffix, blob = draw(st.sampled_from(BLOBS))
    data = bytearray(blob)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        op = draw(st.sampled_from(["flip", "delete", "insert", "dup_line", "drop_line"]))
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "insert":
            data[i:i] = draw(
                st.binary(min_size=1, max_size=6)
                | st.sampled_from(
                    [
                        b":",
                        b"- ",
                        b"{",
                        b"[",
                        b"&a ",
                        b"*a",
                        b"!!python/object ",
                        b"\t",
                        b"${X}",
                        b"\n  ",
                        b'"',
                        b"=",
                        b"#",
                    ]
                )
            )
        else:
            lines = bytes(data).split(b"\n")
            j = draw(st.integers(0, len(lines) - 1))
            if op == "dup_line":
                lines.insert(j, lines[j])
            else:
                del lines[j]
            data = bytearray(b"\n".join(lines))
    return suffix, bytes(data)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


DOCS = []
for _p in SOURCES:
    _doc, _ = load_document(_p)
    if _doc is not None:
        DOCS.append(json.loads(json.dumps(_doc.data, default=str)))

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["25%", "-5%", "${HOME}", "${NOPE}", "default", "*", "error"]),
    st.just([]),
    st.just({}),
)


@st.composite
def data_mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    data = json.loads(json.dumps(draw(st.sampled_from(DOCS))))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for el in path[:-1]:
            parent = parent[el]
        op = draw(st.sampled_from(["delete", "swap", "add_key"]))
        if op == "delete":
            del parent[path[-1]]
        elif op == "swap":
            parent[path[-1]] = draw(SCALARS)
        elif isinstance(parent, dict):
            parent[
                draw(
                    st.sampled_from(
                        ["extends", "tagret", "include", "model", "options", "at", "layer"]
                    )
                )
            ] = draw(SCALARS)
    return ".yaml", json.dumps(data, allow_nan=True).encode()


@settings(PROFILE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(byte_mutations())
def test_fuzz_byte_mutations(case: tuple[str, bytes]) -> None:
    _check(*case)


@settings(PROFILE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data_mutations())
def test_fuzz_data_mutations(case: tuple[str, bytes]) -> None:
    _check(*case)
