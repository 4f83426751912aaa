"""The docs are true: every shell and Python snippet of README.md and docs/ runs.

Every fenced block of a Markdown file under docs/ (and README.md, policies/README.md)
that is Python (```python) or shell (```sh, ```bash, ```console, or an unlabelled
block whose lines start with ``$ ``) is run, or explicitly skipped with a reason in an
HTML comment on the line before the fence:

* ``<!-- not-run: reason -->`` — not run (needs an API key, installs packages, …);
* ``<!-- expect-exit: N -->`` — a shell block whose last command exits with ``N``.

Python blocks of one file run in order in one interpreter sharing one namespace (a page
builds on its earlier blocks). Shell blocks with ``$ `` prompts run only the prompted
commands (the other lines are their output); other shell blocks run as a script with
``set -euo pipefail``. Everything runs in a scratch copy of the repository's layout
(``policies/``, ``examples/`` and ``schemas/`` copied, the rest linked, ``../shared``
beside it), with ``ctxpolicy`` and ``python`` of this interpreter first on ``PATH`` and a
private ``CTXPOLICY_HOME``; each file has a time limit, and two pages run at once.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from .shared_data import SHARED

ROOT = Path(__file__).resolve().parents[1]
MARKDOWN = sorted(
    [
        ROOT / "README.md",
        ROOT / "policies" / "README.md",
        *(ROOT / "docs").rglob("*.md"),
    ]
)
PYTHON_LANGS = {"python", "py", "python3"}
SHELL_LANGS = {"sh", "bash", "shell", "console", "zsh"}
#: Pages owned by other work in progress whose snippets are false today (each reason is
#: what the test reports). Strict: once a page is fixed, its entry must go.
KNOWN_FALSE: dict[str, str] = {}
#: Seconds per Markdown file (all its snippets): a bound against hangs, not a speed goal.
#: The whole test costs ~28 s of CPU (measured 2026-12-03; most in the integration pages);
#: the Google ADK page alone imports ADK and LiteLLM, which took over 120 s of wall time
#: on a 2-core machine at load 10, so the bound is generous.
FILE_TIMEOUT = 360
WORKERS = 2  # pages run at the same time
COPIED = ("policies", "examples", "schemas")

#: Commands a docs test must never run: they install, publish, fetch or rebuild. A block
#: containing one must carry ``not-run`` (the test fails, without running it, otherwise).
UNSAFE = re.compile(
    r"\b(pip3?|python3? -m pip) install\b|\btwine\b|\bmake\b|\bgit (push|clone)\b"
    r"|\bcurl\b|\bwget\b|\brm -rf\b|\bpre-commit install\b"
)
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)")
_MARKER = re.compile(r"<!--\s*(?P<kind>not-run|expect-exit)\s*:\s*(?P<arg>.*?)\s*-->")


@dataclass(frozen=True)
class Snippet:
    file: Path
    line: int  # 1-based line of the opening fence
    kind: str  # "python" or "shell"
    code: str
    skip: str | None = None  # reason
    expect_exit: int = 0

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def snippets(path: Path) -> list[Snippet]:
    """The Python and shell fences of ``path``, with their markers."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Snippet] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, indent = m.group("fence"), m.group("lang").lower(), len(m.group("indent"))
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[i + 1 : j]]
        kind = (
            "python"
            if lang in PYTHON_LANGS
            else "shell"
            if lang in SHELL_LANGS or (not lang and any(b.startswith("$ ") for b in body))
            else None
        )
        if kind is not None:
            k = i - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            marker = _MARKER.search(lines[k]) if k >= 0 else None
            skip, expect = None, 0
            if marker and marker.group("kind") == "not-run":
                skip = marker.group("arg")
                assert skip, f"{path}:{k + 1}: `not-run` needs a reason"
            elif marker:
                expect = int(marker.group("arg"))
            out.append(Snippet(path, i + 1, kind, "\n".join(body) + "\n", skip, expect))
        i = j + 1
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch checkout: copies of the small data dirs, links to the rest, ../shared."""
    base = tmp_path_factory.mktemp("docs")
    work = base / "repo"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name in ("build",) or entry.suffix == ".egg-info":
            continue
        if entry.name in COPIED:
            shutil.copytree(entry, work / entry.name, ignore=shutil.ignore_patterns("build"))
        else:
            (work / entry.name).symlink_to(entry)
    if SHARED.exists():
        (base / "shared").symlink_to(SHARED)
    return work


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CTXPOLICY_HOME"] = str(work.parent / "home")
    env["COLUMNS"] = "100"
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    return env


# Runs the Python blocks of one file in one namespace; one JSON line per block.
_RUNNER = r"""
import json, sys, traceback
blocks = json.load(sys.stdin)
ns = {"__name__": "__main__"}
for where, code in blocks:
    try:
        exec(compile(code, where, "exec"), ns)
        print(json.dumps({"where": where, "ok": True}), flush=True)
    except BaseException as exc:
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        print(json.dumps({"where": where, "ok": False, "error": "".join(tb[-3:])}), flush=True)
"""


def _run_python(blocks: list[Snippet], work: Path, budget: float) -> list[str]:
    payload = json.dumps([[b.where, b.code] for b in blocks])
    try:
        p = subprocess.run(
            [sys.executable, "-c", _RUNNER],
            input=payload,
            capture_output=True,
            text=True,
            cwd=work,
            env=_env(work),
            timeout=budget,
        )
    except subprocess.TimeoutExpired:
        return [f"{blocks[0].file.name}: Python blocks did not finish within {budget:.0f} s"]
    results = [json.loads(line) for line in p.stdout.splitlines() if line.startswith('{"where"')]
    failures = [f"{r['where']}: {r['error']}" for r in results if not r["ok"]]
    if len(results) < len(blocks):
        failures.append(f"{blocks[0].file.name}: runner died: {p.stderr[-800:]}")
    return failures


def _shell_commands(s: Snippet) -> list[str]:
    prompted = [line[2:] for line in s.code.splitlines() if line.startswith("$ ")]
    return prompted or [s.code]


def _run_shell(s: Snippet, work: Path, budget: float) -> list[str]:
    commands = _shell_commands(s)
    unsafe = [c.strip() for c in commands if UNSAFE.search(c)]
    if unsafe:
        return [f"{s.where}: `{unsafe[0][:80]}` must not run in tests: mark the block not-run"]
    failures = []
    for n, cmd in enumerate(commands):
        last = n == len(commands) - 1
        try:
            p = subprocess.run(
                ["bash", "-c", "set -euo pipefail\n" + cmd],
                capture_output=True,
                text=True,
                cwd=work,
                env=_env(work),
                timeout=budget,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"{s.where}: `{cmd.strip()[:80]}` did not finish within {budget:.0f} s")
            break
        want = s.expect_exit if last else 0
        if p.returncode != want:
            failures.append(
                f"{s.where}: `{cmd.strip()[:80]}` exited {p.returncode}, expected {want}: "
                f"{(p.stderr or p.stdout)[-600:]}"
            )
            break
    return failures


def test_every_markdown_file_is_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in MARKDOWN}
    assert {"README.md", "docs/simulate.md", "docs/tokenizers.md"} <= names


def test_markers_and_classification(tmp_path: Path) -> None:
    """The parser itself: languages, prompts, markers (a test of the test)."""
    md = tmp_path / "x.md"
    md.write_text(
        "```python\nprint(1)\n```\n"
        "<!-- not-run: needs an API key -->\n```bash\ncurl x\n```\n"
        "```\n$ ctxpolicy --version\nctxpolicy 0.1.0\n```\n"
        "```\nplain output, not a snippet\n```\n"
        "<!-- expect-exit: 1 -->\n\n```console\n$ false\n```\n"
        "```yaml\na: 1\n```\n",
        encoding="utf-8",
    )
    got = [(s.line, s.kind, s.skip, s.expect_exit) for s in snippets(md)]
    assert got == [
        (1, "python", None, 0),
        (5, "shell", "needs an API key", 0),
        (8, "shell", None, 0),
        (17, "shell", None, 1),
    ]
    prompted = snippets(md)[2]
    assert _shell_commands(prompted) == ["ctxpolicy --version"]
    for cmd in ("pip install x", "python -m pip install -e .", "make demo", "twine upload d/*"):
        assert UNSAFE.search(cmd), cmd
    assert not UNSAFE.search("ctxpolicy validate policies/ && python -m pytest -q")


def _run_file(path: Path, work: Path) -> list[str]:
    runnable = [s for s in snippets(path) if s.skip is None]
    failures: list[str] = []
    py = [s for s in runnable if s.kind == "python"]
    if py:
        failures += _run_python(py, work, FILE_TIMEOUT)
    for s in runnable:
        if s.kind == "shell":
            failures += _run_shell(s, work, FILE_TIMEOUT)
    return failures


@pytest.fixture(scope="module")
def outcomes(workdir: Path) -> dict[Path, list[str]]:
    """Every page's failures, pages run concurrently (each in its own subprocesses)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {p: pool.submit(_run_file, p, workdir) for p in MARKDOWN}
        return {p: f.result() for p, f in futures.items()}


def _param(p: Path) -> object:
    rel = p.relative_to(ROOT).as_posix()
    reason = KNOWN_FALSE.get(rel)
    marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
    return pytest.param(p, id=rel, marks=marks)


@pytest.mark.parametrize("path", [_param(p) for p in MARKDOWN])
def test_snippets_run(path: Path, outcomes: dict[Path, list[str]]) -> None:
    failures = outcomes[path]
    assert not failures, "\n\n".join(failures)
