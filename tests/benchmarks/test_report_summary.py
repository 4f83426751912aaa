"""docs/benchmarks.md opens with a one-screen summary generated from the results files,
and the notebook below it names no issue and no path of the measuring machine."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.report import RESULTS, for_users, summary

ROOT = Path(__file__).resolve().parents[2]


def _peer_results(tmp: Path) -> Path:
    run = lambda name, cost, none, facts, kept: {  # noqa: E731
        "run": name,
        "window": 16384,
        "billing": {"total_cost": cost, "total_cost_none": none},
        "retention": {"facts": facts, "in_context": kept},
    }
    doc = {
        "peer_reference": "agents.yaml:coding_agent",
        "peer_results": [
            {
                "trace": f"t{i}.jsonl",
                "window": 16384,
                "runs": [
                    run("ctxpolicy agents.yaml:coding_agent", 60, 100, 10, 9),
                    run("LangChain SummarizationMiddleware", 80, 100, 10, 8),
                    run("langmem summarize_messages (running summary)", 50, 100, 10, 7),
                ],
            }
            for i in range(2)
        ],
    }
    (tmp / "bench_peers_ruler.json").write_text(json.dumps(doc), encoding="utf-8")
    times = {"d50": 0.001, "g50": 0.00295, "d99": 0.00499, "g99": 0.00818, "n": 400}
    gateway = {"scenarios": {"sequential, 1 conversation": times}}
    (tmp / "bench_gateway.json").write_text(json.dumps(gateway), encoding="utf-8")
    return tmp


def test_summary_pools_the_traces_and_compares_each_peer(tmp_path: Path) -> None:
    text = "\n".join(summary(_peer_results(tmp_path)))
    assert text.startswith("## Summary")
    assert "| 16,384 | ctxpolicy `agents.yaml:coding_agent` | 0.600 | 90.0% | — |" in text
    assert "| 16,384 | LangChain summarization | 0.800 | 80.0% | 0.75 |" in text
    assert "| 16,384 | langmem | 0.500 | 70.0% | 1.20 |" in text
    assert "+1.95 ms at the median, +3.19 ms at p99" in text
    assert len(text.splitlines()) < 40  # one screen


def test_the_committed_page_opens_with_the_summary_of_the_committed_results() -> None:
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    head = page.split("## Goals at a glance", 1)[0]
    for line in summary(RESULTS):
        if line.startswith("| "):
            assert line in head, line
    assert "/work/" not in page and "/tmp/" not in page and "/home/" not in page
    assert "issue " not in page.lower().replace("issues", "")


def test_for_users() -> None:
    text = (
        "## Fact extraction (issue 32)\n"
        "Baseline: `/work/base6e` (before issue 32's work); goals of issue 19 items 5–10 met.\n"
        "## Incident scenarios (design B)"
    )
    assert for_users(text) == (
        "## Fact extraction\n"
        "Baseline: `<baseline checkout>` (before the work); goals of the change met.\n"
        "## Incident scenarios"
    )


def test_the_committed_page_is_the_render_of_the_committed_results(tmp_path: Path) -> None:
    """docs/benchmarks.md is generated, never edited: rendering benchmarks/results gives it
    back byte for byte (`make docs` after new results)."""
    from benchmarks import report

    out = tmp_path / "benchmarks.md"
    assert report.main(["--out", str(out), "--img", str(tmp_path / "img")]) == 0
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == page, "run `make docs`"
