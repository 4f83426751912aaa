"""The deterministic summary both sides use (benchmarks/peers/summary.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, get_buffer_string

from benchmarks.peers.runs import ruler
from benchmarks.peers.summary import (
    HEADER,
    DigestChatModel,
    ctxpolicy_summary,
    digest,
    prompt_messages_text,
)
from ctxpolicy.components import SummaryRequest


@settings(max_examples=40, deadline=None)
@given(text=st.text(min_size=0, max_size=2000), budget=st.integers(min_value=20, max_value=400))
def test_digest_is_bounded_and_deterministic(text: str, budget: int) -> None:
    count = ruler().count_text
    out = digest(text, budget, count)
    assert out.startswith(HEADER)
    assert count(out) <= budget
    assert out == digest(text, budget, count)


def test_digest_keeps_the_newest_facts_when_short() -> None:
    count = ruler().count_text
    text = " ".join(f"/src/mod_{i}/file_{i}.py" for i in range(200))
    out = digest(text, 60, count)
    assert "/src/mod_199/file_199.py" in out
    assert "/src/mod_0/file_0.py" not in out


CONVO = [
    {"role": "user", "content": "Fix the bug in src/app/models.py (ticket JIRA-4242)"},
    {
        "role": "assistant",
        "content": "Reading it.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "cat src/app/models.py"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "raise ValueError & <broken> at 250 ms"},
]


def test_both_sides_get_the_same_digest_of_the_same_messages() -> None:
    """ctxpolicy's callable summary and LangChain's model see the same facts."""
    count = ruler().count_text
    ours = ctxpolicy_summary(count)(
        SummaryRequest(messages=CONVO, previous_summary=None, max_tokens=300, instructions="")
    )
    lc_msgs = [
        HumanMessage(CONVO[0]["content"]),
        AIMessage(
            "Reading it.",
            tool_calls=[{"id": "c1", "name": "bash", "args": {"command": "cat src/app/models.py"}}],
        ),
        ToolMessage(CONVO[2]["content"], tool_call_id="c1"),
    ]
    prompt = f"<messages>\nMessages to summarize:\n{get_buffer_string(lc_msgs, format='xml')}\n</messages>"
    model = DigestChatModel(count=count, max_tokens=300)
    theirs = model.invoke(prompt).text
    assert model.calls == [len(prompt)]
    for fact in ("src/app/models.py", "JIRA-4242", "ValueError", "250 ms"):
        assert fact in ours and fact in theirs
    assert "type=" not in theirs  # the XML of the prompt is not taken for facts
    assert "&amp; &lt;broken&gt;" in prompt  # LangChain escapes the XML ...
    assert "& <broken>" in prompt_messages_text(prompt)  # ... and the model reads it back
