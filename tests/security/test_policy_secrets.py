"""Issue 19 item 2: a secret interpolated with ``${NAME}`` never leaks through diagnostics.

The attacker's move: a pull request puts ``${AWS_SECRET_ACCESS_KEY}`` into any field of a
policy file; CI runs ``ctxpolicy validate`` (any output format) or ``ctxpolicy explain``
and the log shows the value. Every field type is attacked at once, with a secret that
also carries quotes, backslashes, ``%`` and non-ASCII (so escaped forms in repr, JSON
and GitHub annotations are covered), and each output must show ``${NAME}`` instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxpolicy.cli import main
from ctxpolicy.policy.diagnostics import PolicyError
from ctxpolicy.resolve.load import load_policy, validate_file

SECRET = "AKIA-s3cr3t\"quote's\\back%25slash-ünï-0123456789abcdef"
NAME = "CTX_FAKE_SECRET"


def escaped_forms(secret: str) -> set[str]:
    """Every way a formatter could print the value."""
    forms = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1]}
    forms.add(json.dumps(secret, ensure_ascii=True)[1:-1])
    forms |= {f.replace("%", "%25") for f in list(forms)}
    # a recognisable chunk: a truncated message must not leak a prefix either
    forms.add("s3cr3t")
    return forms


#: One policy that puts the secret into every kind of field: names looked up in
#: registries and catalogues, numbers, enums, lists, paths, extends, include.
EVERY_FIELD = f"""\
ctxpolicy: 1
include: ["${{{NAME}}}/shared.yaml"]
models:
  m-int: {{context_window: "${{{NAME}}}", max_output_tokens: "${{{NAME}}}"}}
  m-tok: {{context_window: 10000, tokenizer: "${{{NAME}}}"}}
  m-toklist: {{context_window: 10000, tokenizer: ["x${{{NAME}}}", heuristic], name: "${{{NAME}}}"}}
policies:
  default:
    model: "${{{NAME}}}"
    description: "${{{NAME}}}"
    budget: {{window: "${{{NAME}}}", reserve_output: "${{{NAME}}}", target: "pre-${{{NAME}}}",
              safety_margin: "${{{NAME}}}", tool_growth: {{learn: {{quantile: "${{{NAME}}}"}}}}}}
    thresholds: {{warning: "${{{NAME}}}", error: 0.9}}
    pipeline:
      - {{layer: "${{{NAME}}}", at: "${{{NAME}}}"}}
      - {{layer: observation_mask, options: {{max_chars: "${{{NAME}}}", max_age_rounds: 2}}}}
      - {{layer: summarize, options: {{summarizer: "${{{NAME}}}"}}}}
    on_overflow: {{layer: "${{{NAME}}}"}}
    tools:
      "*": {{preprocess: "${{{NAME}}}", snapshot: "${{{NAME}}}"}}
    snapshots: {{store: "${{{NAME}}}", path: "${{{NAME}}}", reference: "${{{NAME}}}",
                 max_snapshot_bytes: "${{{NAME}}}"}}
    ledger: {{enabled: "${{{NAME}}}", max_tokens: "${{{NAME}}}"}}
    cache: {{preserve_prefix: "${{{NAME}}}"}}
  child:
    extends: "${{{NAME}}}"
  tok-int:
    model: m-int
  tok-str:
    model: m-tok
  tok-list:
    model: m-toklist
"""


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    p = tmp_path / "attack.yaml"
    p.write_text(EVERY_FIELD, encoding="utf-8")
    return p


def _assert_clean(text: str, secret: str = SECRET) -> None:
    for form in escaped_forms(secret):
        assert form not in text, f"secret leaked as {form!r}"


def test_every_field_in_process(policy: Path) -> None:
    diags = validate_file(policy, env={NAME: SECRET}, json_schema=True)
    assert len(diags) >= 15, "the attack file must exercise many checks"
    text = "\n".join(d.format() for d in diags) + json.dumps([d.to_dict() for d in diags])
    _assert_clean(text)
    assert f"${{{NAME}}}" in text  # shown as written
    with pytest.raises(PolicyError) as exc:
        load_policy(policy, "default", env={NAME: SECRET})
    _assert_clean(str(exc.value))


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_every_output_format_of_the_real_cli(policy: Path, fmt: str) -> None:
    env = {**os.environ, NAME: SECRET}
    proc = subprocess.run(
        [sys.executable, "-m", "ctxpolicy.cli", "validate", "--format", fmt, str(policy)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    _assert_clean(proc.stdout + proc.stderr)
    assert NAME in proc.stdout


def test_explain_masks_env_values_unless_show_env(tmp_path: Path) -> None:
    p = tmp_path / "ok.yaml"
    p.write_text(
        "ctxpolicy: 1\npolicies:\n  default:\n    model: gpt-4o\n"
        f'    description: "key ${{{NAME}}}"\n'
        f'    snapshots: {{path: "${{{NAME}}}/snaps"}}\n'
        f'    constraints: ["never print ${{{NAME}}}"]\n',
        encoding="utf-8",
    )
    runner = CliRunner()
    env = {NAME: SECRET}
    for args in (["--full"], ["--json"], []):
        r = runner.invoke(main, ["explain", str(p), *args], env=env)
        assert r.exit_code == 0, r.output
        _assert_clean(r.output)
    r = runner.invoke(main, ["explain", str(p), "--full"], env=env)
    assert f"${{{NAME}}}/snaps" in r.output
    shown = runner.invoke(main, ["explain", str(p), "--json", "--show-env"], env=env)
    doc = json.loads(shown.output)
    assert doc["policy"]["description"] == f"key {SECRET}"
    # the store path is interpolated when a session opens the store, never before
    assert doc["policy"]["snapshots"]["path"] == f"${{{NAME}}}/snaps"


def test_explain_of_a_broken_policy_does_not_leak(policy: Path) -> None:
    r = CliRunner().invoke(main, ["explain", str(policy), "--agent", "default"], env={NAME: SECRET})
    assert r.exit_code == 1
    _assert_clean(r.output)


FIELDS = [
    "model: {v}",
    "model: {{context_window: {v}}}",
    "model: {{context_window: 1000, tokenizer: {v}}}",
    "budget: {{window: {v}}}",
    "thresholds: {{critical: {v}}}",
    "pipeline: [{{layer: {v}}}]",
    "pipeline: [{{layer: drop_rounds, options: {{keep_recent_rounds: {v}}}}}]",
    "snapshots: {{store: {v}}}",
    "extends: {v}",
]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    secret=st.text(
        st.characters(blacklist_categories=("Cs", "Cc")), min_size=8, max_size=60
    ).filter(lambda s: s.strip() == s and len(set(s)) > 4),
    field=st.sampled_from(FIELDS),
    wrap=st.sampled_from(['"${{{n}}}"', '"a${{{n}}}b"', '"${{env:{n}}}"']),
    tmp=st.just(None),
)
def test_any_secret_in_any_field(
    secret: str, field: str, wrap: str, tmp: None, tmp_path: Path
) -> None:
    value = wrap.format(n=NAME)
    text = "ctxpolicy: 1\npolicies:\n  default:\n    " + field.format(v=value) + "\n"
    p = tmp_path / "p.yaml"
    p.write_text(text, encoding="utf-8")
    diags = validate_file(p, env={NAME: secret}, json_schema=True)
    out = "\n".join(d.format() for d in diags)
    for form in {secret, repr(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}:
        assert form not in out
