"""``ctxpolicy explain`` arithmetic and ``ctxpolicy convert`` round trips."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli
from click.testing import CliRunner

from ctxpolicy.cli import main
from ctxpolicy.cli.convert import to_toml, to_yaml

from .conftest import DATA, ROOT, default_policy, needs

pytestmark = pytest.mark.usefixtures("in_root")


def test_explain_code_review_arithmetic(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["explain", str(DATA / "valid.yaml"), "--agent", "code_review_agent"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(li.startswith("window = ") and li.endswith(" 128000) = 128000") for li in lines) or (
        "window = model 128000 = 128000" in lines
    )
    assert (
        "trigger = 128000 − 16000 (reserve_output) − 20000 (tool_growth) − 4000 "
        "(safety_margin) = 88000"
    ) in lines
    assert "target = 0.6 × 88000 = 52800" in lines
    assert any(li.startswith("warning = 0.70 × 88000 = ") for li in lines)
    assert any(li.startswith("critical = 0.95 × 88000 = ") for li in lines)
    # the resolved policy only with --full (extends merged)
    assert "agent: code_review_agent" not in r.output
    full = runner.invoke(
        main, ["explain", str(DATA / "valid.yaml"), "--agent", "code_review_agent", "--full"]
    )
    assert "agent: code_review_agent" in full.output and "observation_mask" in full.output
    # the arithmetic comes first, the policy after it
    assert full.output.index("trigger = ") < full.output.index("agent: code_review_agent")


def test_explain_window_min_line(runner: CliRunner, tmp_path: Path) -> None:
    needs("ctxpolicy.resolve.load")
    f = default_policy(
        tmp_path / "p.yaml",
        "    model: {context_window: 128000}\n"
        "    budget: {window: 128000, reserve_output: 16000, tool_growth: 20000,"
        " safety_margin: 4000, target: 0.6}\n",
    )
    r = runner.invoke(main, ["explain", str(f), "--agent", "default"])
    assert "window = min(policy 128000, model 128000) = 128000 (equal)" in r.output.splitlines()


def test_explain_dbgpt_qwen_window_smaller_wins(runner: CliRunner) -> None:
    """The policy says 120000, the model 32768: both shown, the model's wins."""
    r = runner.invoke(main, ["explain", "policies/dbgpt.toml", "--agent", "qwen_coder"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert (
        "window = min(policy 120000, model 32768) = 32768 (the smaller wins: the model's)" in lines
    )
    assert (
        "trigger = 32768 − 4096 (reserve_output) − 0 (tool_growth) − 0 (safety_margin) = 28672"
        in lines
    )


def test_explain_without_budget_window_says_model(runner: CliRunner) -> None:
    r = runner.invoke(main, ["explain", "policies/agents.yaml", "--agent", "default"])
    assert r.exit_code == 0, r.output
    assert "window = model 128000 = 128000" in r.output.splitlines()
    assert "min(policy" not in r.output


def test_explain_one_agent_needs_no_agent_option(runner: CliRunner, tmp_path: Path) -> None:
    f = tmp_path / "one.yaml"
    f.write_text("ctxpolicy: 1\npolicies:\n  solo:\n    model: gpt-4o\n")
    r = runner.invoke(main, ["explain", str(f)])
    assert r.exit_code == 0, r.output
    assert "agent 'solo'" in r.output and "window = model 128000 = 128000" in r.output
    two = tmp_path / "two.yaml"
    two.write_text("ctxpolicy: 1\npolicies:\n  a: {model: gpt-4o}\n  b: {model: gpt-4o}\n")
    r = runner.invoke(main, ["explain", str(two)])
    assert r.exit_code == 1 and "--agent" in r.output and "a, b" in r.output


def test_explain_full_yaml_parses_back(runner: CliRunner) -> None:
    """--full prints YAML that reads back to the resolved policy, for every shipped
    agent: no folded values (the long `pattern:` regex of log_levels), no blank values."""
    from ruamel.yaml import YAML

    from ctxpolicy.resolve.load import list_agents, load_policy

    seen_pattern = False
    for agent in list_agents("policies/agents.yaml"):
        r = runner.invoke(main, ["explain", "policies/agents.yaml", "--agent", agent, "--full"])
        assert r.exit_code == 0, r.output
        text = "agent: " + r.output.split("\nagent: ", 1)[1]
        parsed = YAML(typ="safe", pure=True).load(text)
        expected = load_policy("policies/agents.yaml", agent).model_dump(
            mode="json", exclude={"source"}
        )
        assert parsed == expected, agent
        for line in text.splitlines():
            key, sep, value = line.strip().partition(":")
            if key == "pattern":
                seen_pattern = True
                assert value.strip(), f"{agent}: a folded pattern: value"
            if sep and not value.strip():  # only mappings and lists may open a block
                nxt = text.splitlines()[text.splitlines().index(line) + 1]
                assert len(nxt) - len(nxt.lstrip()) > len(line) - len(line.lstrip()) or (
                    nxt.lstrip().startswith("- ")
                ), f"{agent}: blank value {line!r}"
    assert seen_pattern, "the shipped agents exercise a long regex option"


def test_explain_shows_the_token_counter(runner: CliRunner, tmp_path: Path) -> None:
    r = runner.invoke(main, ["explain", "policies/agents.yaml", "--agent", "default"])
    [line] = [li for li in r.output.splitlines() if li.startswith("tokens: ")]
    assert "o200k_base" in line and "(exact" in line
    f = default_policy(
        tmp_path / "h.yaml", "    model: {context_window: 9000, tokenizer: heuristic}\n"
    )
    r = runner.invoke(main, ["explain", str(f), "--json"])
    doc = json.loads(r.output)
    assert doc["tokenizer"]["using"] == "heuristic" and doc["tokenizer"]["exact"] is False
    r = runner.invoke(main, ["explain", str(f)])
    assert "tokens: heuristic (APPROXIMATE" in r.output


def test_explain_json(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(
        main, ["explain", "policies/agents.yaml", "--agent", "coding_agent", "--json"]
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["agent"] == "coding_agent"
    b = doc["budget"]  # the terms are shares of the window: the arithmetic holds
    assert b["trigger"] == 32768 - b["reserve_output"] - b["tool_growth"] - b["safety_margin"]
    assert doc["policy"]["model"]["context_window"] == 32768
    assert any(li.startswith("trigger = ") for li in doc["arithmetic"])


def test_explain_unknown_agent_exit_1(runner: CliRunner) -> None:
    needs("ctxpolicy.resolve.load")
    r = runner.invoke(main, ["explain", "policies/agents.yaml", "--agent", "nobody"])
    assert r.exit_code == 1
    assert "Traceback" not in r.output


# --------------------------------------------------------------------------- convert


def test_toml_writer_round_trips_and_keeps_tool_order() -> None:
    tree: dict[str, Any] = {
        "ctxpolicy": 1,
        "models": {"qwen2.5-coder": {"context_window": 32768, "tokenizer": ["a", "b"]}},
        "policies": {
            "default": {
                "constraints": ['say "hi"\n', "ünïcode"],
                "budget": {"tool_growth": {"learn": {"quantile": 0.9}, "initial": 6000}},
                "pipeline": [
                    {"layer": "a", "options": {"x": 1, "y": {"z": [1, 2]}}},
                    {"layer": "b"},
                ],
                "tools": {
                    "*": {"preprocess": "p", "options": {"long": "v" * 90}},
                    "sql*": {},
                    "x": {"a": 1},
                },
            }
        },
    }
    back = tomli.loads(to_toml(tree))
    assert back == tree
    assert list(back["policies"]["default"]["tools"]) == ["*", "sql*", "x"]


def test_yaml_writer_header() -> None:
    text = to_yaml({"ctxpolicy": 1}, header="# hello\n")
    assert text.startswith("# hello\nctxpolicy: 1")


def _dumps(path: str, agents: list[str]) -> dict[str, Any]:
    from ctxpolicy.resolve.load import load_policy

    return {a: load_policy(path, a).model_dump(exclude={"source"}) for a in agents}


@pytest.mark.parametrize(
    "source",
    ["dbgpt_agent_context.toml", "context_compression.yaml", "valid.yaml", "valid.toml"],
)
@pytest.mark.parametrize("to", ["yaml", "toml"])
def test_converted_file_resolves_to_same_policy(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, to: str
) -> None:
    needs("ctxpolicy.resolve.load")
    needs("ctxpolicy.policy.compat")
    from ctxpolicy.resolve.load import list_agents

    monkeypatch.setenv("SILICONFLOW_API_KEY", "sk-test")
    src = DATA / source
    out = tmp_path / f"converted.{to}"
    r = runner.invoke(main, ["convert", str(src), "--to", to, "-o", str(out)])
    assert r.exit_code == 0, r.output
    text = out.read_text(encoding="utf-8")
    assert text.splitlines()[0] in (
        "# yaml-language-server: $schema=../schemas/ctxpolicy.schema.json",
        "#:schema ../schemas/ctxpolicy.schema.json",
    )
    agents = list_agents(str(src))
    assert agents and list_agents(str(out)) == agents
    assert _dumps(str(out), agents) == _dumps(str(src), agents)
    v = runner.invoke(main, ["validate", str(out)])
    assert v.exit_code == 0, v.output


def test_convert_to_stdout(runner: CliRunner) -> None:
    needs("ctxpolicy.policy.compat")
    r = runner.invoke(main, ["convert", str(DATA / "context_compression.yaml"), "--to", "yaml"])
    assert r.exit_code == 0, r.output
    assert "ctxpolicy: 1" in r.output and "code_review_agent" in r.output


def test_convert_broken_file_exit_1(runner: CliRunner) -> None:
    needs("ctxpolicy.policy.load")
    r = runner.invoke(main, ["convert", str(DATA / "broken.yaml"), "--to", "toml"])
    assert r.exit_code == 1 and "Traceback" not in r.output


def test_convert_requires_to(runner: CliRunner) -> None:
    assert runner.invoke(main, ["convert", str(DATA / "valid.yaml")]).exit_code == 2


def test_plugins_command(runner: CliRunner) -> None:
    r = runner.invoke(main, ["plugins", "--json"])
    doc = json.loads(r.output)
    assert r.exit_code == (1 if doc["problems"] else 0)
    assert set(doc) == {"plugins", "components", "problems"}
    builtin = [p for p in doc["plugins"] if p["builtin"]]
    assert builtin and all(p["version"] for p in builtin)
    if "observation_mask" in doc["components"]["layer"]:
        r = runner.invoke(main, ["plugins"])
        assert "layer observation_mask" in r.output


def test_root_is_repo() -> None:
    assert (ROOT / "pyproject.toml").exists()


def _claude_code_like_request(tools: int = 24) -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run " * 20},
            "timeout": {"type": "number", "description": "Milliseconds."},
        },
        "required": ["command"],
    }
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": [
            {"type": "text", "text": "You are Claude Code."},
            {"type": "text", "text": "Follow the repository's conventions. " * 300},
        ],
        "tools": [
            {
                "name": f"Tool{i}",
                "description": "Does one thing well. " * 40,
                "input_schema": schema,
            }
            for i in range(tools)
        ],
        "messages": [{"role": "user", "content": "fix the bug"}],
    }


def test_explain_says_what_a_clients_fixed_prefix_takes(runner: CliRunner, tmp_path: Path) -> None:
    presets = str(ROOT / "policies" / "coding_clients.yaml")
    body = tmp_path / "request.json"
    body.write_text(json.dumps(_claude_code_like_request()))
    r = runner.invoke(
        main, ["explain", presets, "--agent", "claude_code", "--prefix-file", str(body)]
    )
    assert r.exit_code == 0, r.output
    line = next(li for li in r.output.splitlines() if li.startswith("fixed prefix = "))
    assert "system " in line and "+ 24 tools " in line and str(body) in line
    assert "% of the window (200000)" in r.output and "fits: " in r.output
    js = runner.invoke(
        main, ["explain", presets, "--agent", "claude_code", "--prefix-file", str(body), "--json"]
    )
    prefix = json.loads(js.output[js.output.index("{") :])["prefix"]
    assert prefix["tool_count"] == 24
    assert prefix["total"] == prefix["system"] + prefix["tools"] > 5000
    # the same body in OpenAI chat form counts the same system prompt
    chat = {
        "messages": [
            {"role": "system", "content": "You are Claude Code."},
            {"role": "system", "content": "Follow the repository's conventions. " * 300},
            {"role": "user", "content": "fix the bug"},
        ]
    }
    body.write_text(json.dumps(chat))
    js2 = runner.invoke(
        main, ["explain", presets, "--agent", "claude_code", "--prefix-file", str(body), "--json"]
    )
    assert json.loads(js2.output[js2.output.index("{") :])["prefix"]["system"] == prefix["system"]


def test_explain_warns_when_the_prefix_does_not_fit(runner: CliRunner, tmp_path: Path) -> None:
    r = runner.invoke(
        main,
        ["explain", str(DATA / "valid.yaml"), "--agent", "default", "--prefix-tokens", "200000"],
    )
    assert r.exit_code == 0, r.output
    assert "the prefix alone is at or above the trigger" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    r = runner.invoke(
        main, ["explain", str(DATA / "valid.yaml"), "--agent", "default", "--prefix-file", str(bad)]
    )
    assert r.exit_code == 2 and "not a JSON request body" in r.output
    assert "Traceback" not in r.output
