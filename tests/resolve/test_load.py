"""Resolution: extends merge, includes, env, catalogue, components, checks, API contract."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import Field

from ctxpolicy.budget import effective_window
from ctxpolicy.components import ComponentOptions, Layer, Preprocessor
from ctxpolicy.plugins import get_registry, hookimpl
from ctxpolicy.policy.diagnostics import PolicyError
from ctxpolicy.policy.paths import interpolate_path
from ctxpolicy.resolve import agents as resolve_agents
from ctxpolicy.resolve.checks import budget_numbers
from ctxpolicy.resolve.load import list_agents, load_policy, resolve_all, validate_file
from tests.conftest import DATA, POLICY_ENV

DESIGN = DATA / "valid" / "design_example.yaml"


def _write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_design_example_resolves_with_defaults_filled() -> None:
    pol = load_policy(DESIGN, "default", env=POLICY_ENV)
    assert pol.agent == "default" and pol.model_name == "gpt-4o"
    assert pol.model.context_window == 128000
    # budget.window stays as written (unset); the model's window is the effective one
    assert pol.budget.window is None and pol.budget.reserve_output == 4096
    assert effective_window(pol) == 128000
    assert [s.layer for s in pol.pipeline] == ["observation_mask", "drop_rounds", "summarize"]
    om = pol.pipeline[0].options
    assert om["max_age_rounds"] == 5 and om["max_chars"] == 200
    reg = get_registry()
    full = reg.get("layer", "observation_mask").Options().model_dump(mode="json")
    assert set(om) == set(full)  # defaults of the component filled in
    assert pol.on_overflow.layer == "emergency" and pol.on_overflow.options["retries"] == 1
    assert list(pol.tools) == ["run_tests", "read_file", "search_logs", "*"]
    # snapshots.path stays as written; the session interpolates it with its env
    assert interpolate_path(pol.snapshots.path, POLICY_ENV) == "/srv/ctx/snapshots"
    nums = budget_numbers(pol)
    # the initial growth (6000) is capped by what the "*" head_tail of 3000 characters
    # lets one result bring: 1500 tokens and a reference line (budget.rule_bound)
    assert (nums.window, nums.trigger) == (128000, 128000 - 4096 - 1564 - 2000)
    assert nums.target == int(0.7 * nums.trigger)
    child = load_policy(DESIGN, "code_review_agent", env=POLICY_ENV)
    assert child.budget.target == 0.6 and child.budget.reserve_output == 4096


def test_extends_merge_semantics() -> None:
    path = DATA / "valid" / "extends_chain.yaml"
    base = load_policy(path, "default", env=POLICY_ENV)
    rev = load_policy(path, "reviewer", env=POLICY_ENV)
    assert rev.budget.target == 12000  # maps merge
    assert rev.budget.reserve_output == 4096  # inherited
    assert rev.budget.safety_margin == 0 and base.budget.safety_margin == 2000  # null deletes
    assert [s.layer for s in rev.pipeline] == ["observation_mask"]  # lists replace
    assert rev.pipeline[0].options["max_chars"] == 500
    # a new glob goes before the first broader parent rule ("*"), after narrower ones
    assert list(rev.tools) == ["run_tests", "read_file", "search_logs", "read_*", "*"]
    strict = load_policy(path, "strict_reviewer", env=POLICY_ENV)
    assert strict.thresholds.warning == 0.6 and strict.thresholds.error == 0.9
    assert strict.budget.target == 12000


def test_disabled_steps_are_not_in_the_resolved_pipeline() -> None:
    pol = load_policy(DATA / "valid" / "disabled_step.yaml", env=POLICY_ENV)
    assert [s.layer for s in pol.pipeline] == ["observation_mask"]


def test_env_values_stay_literal_strings() -> None:
    pol = load_policy(DATA / "valid" / "env_injection.yaml", env=POLICY_ENV)
    assert interpolate_path(pol.snapshots.path, POLICY_ENV) == "/home/test/../.."
    assert pol.description == "$(rm -rf /) `id` /home/test"
    pol = load_policy(DATA / "valid" / "env_defaults.yaml", env={"HOME": "/h"})
    assert interpolate_path(pol.snapshots.path, {"HOME": "/h"}) == "/tmp/ctx/snapshots//h"
    assert pol.description == "Home is /h; literal ${NOT_INTERPOLATED}"


def test_missing_env_var_only_fails_the_agent_that_uses_it(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        "p.yaml",
        (
            "ctxpolicy: 1\npolicies:\n  good:\n    model: {context_window: 9000}\n"
            "  bad:\n    model: {context_window: 9000}\n    snapshots: {path: '${NOPE_X}/s'}\n"
        ),
    )
    assert load_policy(p, "good", env={}).agent == "good"
    with pytest.raises(PolicyError) as exc:
        load_policy(p, "bad", env={})
    assert [d.code for d in exc.value.diagnostics] == ["CTX306"]
    assert {d.code for d in validate_file(p, env={})} == {"CTX306"}
    assert validate_file(p, agent="good", env={}) == []
    pols, diags = resolve_all(p, env={})
    assert list(pols) == ["good"] and len(diags) == 1


def test_include_relative_and_inherited_positions(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "shared/base.yaml",
        (
            "ctxpolicy: 1\nmodels:\n  m: {context_window: 20000}\npolicies:\n  base:\n    model: m\n"
            "    pipeline:\n      - {layer: drop_rounds, options: {min_keep_tokens: 50000}}\n"
        ),
    )
    main = _write(
        tmp_path,
        "agents/main.yaml",
        ("ctxpolicy: 1\ninclude: [../shared/base.yaml]\npolicies:\n  worker:\n    extends: base\n"),
    )
    assert list_agents(main) == ["worker", "base"]
    diags = validate_file(main, agent="worker", env={})
    # the problem is in the included file, reported there with its line:col
    assert [(Path(d.file).name, d.line, d.col, d.code) for d in diags] == [
        ("base.yaml", 8, 40, "CTX204")
    ]


def test_policy_error_carries_diagnostics() -> None:
    bad = DATA / "invalid" / "unknown_layer.yaml"
    with pytest.raises(PolicyError) as exc:
        load_policy(bad, env=POLICY_ENV)
    assert exc.value.diagnostics[0].code == "CTX102"
    assert "did you mean 'summarize'?" in str(exc.value)


def test_unknown_agent_is_a_policy_error() -> None:
    with pytest.raises(PolicyError) as exc:
        load_policy(DESIGN, "nobody", env=POLICY_ENV)
    assert exc.value.diagnostics[0].code == "CTX308"


def test_internal_error_becomes_diagnostic(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(resolve_agents, "check_policy", boom)
    diags = validate_file(DESIGN, env=POLICY_ENV)
    assert diags and all(d.code == "CTX000" for d in diags)
    assert "RuntimeError: kaboom" in diags[0].message


# ------------------------------------------------------------------ third-party components


class _FoldOptions(ComponentOptions):
    depth: int = Field(default=2, ge=1, description="How deep.")
    summarizer: str = Field(default="extractive", description="Summarizer name.")


class _Fold(Layer):
    name = "test_fold"
    Options = _FoldOptions


class _UpperOptions(ComponentOptions):
    limit: int = 10


class _Upper(Preprocessor):
    name = "test_upper"
    Options = _UpperOptions


class _Plugin:
    @hookimpl
    def ctxpolicy_register_layers(self, register: Callable[[type], None]) -> None:
        register(_Fold)

    @hookimpl
    def ctxpolicy_register_preprocessors(self, register: Callable[[type], None]) -> None:
        register(_Upper)


def test_registered_components_are_validated(
    tmp_path: Path, register_plugin: Callable[[object, str], str]
) -> None:
    p = _write(
        tmp_path,
        "p.yaml",
        (
            "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 50000}\n"
            "    pipeline:\n      - {layer: test_fold, options: {depth: 3}}\n"
            "    tools:\n      '*': {preprocess: test_upper}\n"
        ),
    )
    diags = validate_file(p, env={})
    assert [d.code for d in diags] == ["CTX102", "CTX102"]  # not registered yet
    register_plugin(_Plugin(), "test-fold-plugin")
    pol = load_policy(p, env={})
    assert pol.pipeline[0].options == {"depth": 3, "summarizer": "extractive"}
    assert pol.tools["*"].options == {"limit": 10}
    bad = _write(
        tmp_path,
        "bad.yaml",
        (
            "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 50000}\n"
            "    pipeline:\n      - layer: test_fold\n        options: {depth: 0, summarizer: abstractive, dpeth: 1}\n"
        ),
    )
    got = [d.format() for d in validate_file(bad, env={})]
    assert got == [
        f"{bad}:7:19: CTX103 pipeline[0].options.depth: must be at least 1 (got 0)",
        f"{bad}:7:54: CTX101 unknown key 'dpeth' (did you mean 'depth'?)\n    hint: allowed keys: depth, summarizer",
    ]
    bad.write_text(bad.read_text().replace("depth: 0, ", "").replace(", dpeth: 1", ""))
    got = [d.format() for d in validate_file(bad, env={})]
    assert len(got) == 1 and "CTX102 unknown summarizer 'abstractive'" in got[0]


def test_load_policy_without_agent_lists_the_agents(tmp_path: Path) -> None:
    """A file without `default` and no agent given: the error names the agents."""
    from ctxpolicy.policy.diagnostics import PolicyError
    from ctxpolicy.resolve.load import load_policy

    path = tmp_path / "multi.yaml"
    path.write_text(
        "ctxpolicy: 1\npolicies:\n  coder:\n    model: gpt-4o\n  reviewer:\n    model: gpt-4o\n"
    )
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    text = str(info.value)
    assert "its agents: 'coder', 'reviewer'" in text
    assert "agent='coder'" in text
    assert load_policy(path, agent="reviewer").agent == "reviewer"
    # an explicit unknown agent keeps its did-you-mean message
    with pytest.raises(PolicyError, match="no agent 'codr' in this file"):
        load_policy(path, agent="codr")


def test_target_percent_is_the_fraction_it_names(tmp_path: Path) -> None:
    from ctxpolicy.resolve.load import load_policy

    path = tmp_path / "p.yaml"
    body = "ctxpolicy: 1\npolicies:\n  default:\n    model: {{context_window: 32000}}\n    budget: {{target: {}}}\n"
    path.write_text(body.format('"60%"'))
    pct = load_policy(path)
    path.write_text(body.format("0.6"))
    assert pct.budget.target == load_policy(path).budget.target == 0.6


def test_a_type_error_hides_no_other_problem() -> None:
    """The six-problem file of issue 31: every problem on the first pass."""
    from tests.conftest import DATA

    diags = validate_file(DATA / "invalid" / "one_pass_many_problems.yaml")
    assert {d.code for d in diags} >= {"CTX103", "CTX201", "CTX202", "CTX102", "CTX206"}


def test_a_chain_of_preprocessors_is_validated_item_by_item(tmp_path: Path) -> None:
    head = "ctxpolicy: 1\npolicies:\n  default:\n    model: {context_window: 50000}\n    tools:\n"
    good = _write(
        tmp_path,
        "good.yaml",
        head + "      support_*:\n"
        "        preprocess: [redact, {name: table_rows, options: {max_rows: 5}}]\n",
    )
    pol = load_policy(good, env={})
    rule = pol.tools["support_*"]
    assert [(n, o.get("max_rows")) for n, o in rule.steps()] == [
        ("redact", None),
        ("table_rows", 5),
    ]
    assert rule.steps()[1][1]["fallback_chars"] == 3000  # completed by the component's model
    assert rule.preprocessor_name == "redact+table_rows"
    bad = _write(
        tmp_path,
        "bad.yaml",
        head + "      a_*:\n"
        "        preprocess: [redcat, {name: table_rows, options: {max_rowz: 5}}]\n"
        "      b_*:\n"
        "        preprocess: [redact]\n"
        "        options: {max_rows: 3}\n"
        "      c_*: {preprocess: []}\n",
    )
    got = [d.format().splitlines()[0] for d in validate_file(bad, env={})]
    assert got == [
        f"{bad}:7:22: CTX102 unknown preprocessor 'redcat' (did you mean 'redact'?)",
        f"{bad}:7:59: CTX101 unknown key 'max_rowz' (did you mean 'max_rows'?)",
        f"{bad}:10:9: CTX103 tools.'b_*'.options: `options` goes with a single preprocessor: "
        "in a list give each item its own, as {name: ..., options: {...}}",
        f"{bad}:11:13: CTX103 tools.'c_*'.preprocess: an empty list: name at least one "
        "preprocessor",
    ]
