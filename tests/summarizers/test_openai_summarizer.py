import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from pydantic import ValidationError

from ctxpolicy.components import SummaryRequest
from ctxpolicy.engine.overflow import is_context_overflow, parse_limit
from ctxpolicy.layers.summarize import Summarize, SummarizeOptions
from ctxpolicy.summarizers.openai import OpenAISummarizer, OpenAISummarizerOptions
from tests.helpers_conv import Conv, make_ctx


class Server:
    def __init__(self):
        self.requests = []
        self.mode = "ok"
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                if outer.mode == "overflow":
                    status, payload = (
                        400,
                        {
                            "error": {
                                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                                "type": "invalid_request_error",
                                "param": "messages",
                                "code": "context_length_exceeded",
                            }
                        },
                    )
                else:
                    status, payload = (
                        200,
                        {
                            "id": "c1",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {
                                        "role": "assistant",
                                        "content": " Goal: fix AUTH-7. ",
                                    },
                                }
                            ],
                            "usage": {
                                "prompt_tokens": 10,
                                "completion_tokens": 5,
                                "total_tokens": 15,
                            },
                        },
                    )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setenv("TEST_SUMMARY_KEY", "sk-test-123")
    with Server() as s:
        yield s


def opts(server):
    return OpenAISummarizerOptions(
        base_url=server.url, model="tiny", api_key_env="TEST_SUMMARY_KEY", timeout_s=5
    )


REQ = SummaryRequest(
    messages=Conv().user("fix AUTH-7").step(("read_file", {"path": "a.py"}, "content")).messages,
    previous_summary="earlier",
    max_tokens=300,
    instructions="",
    constraints=("never push",),
)


def test_real_sdk_against_local_server(server):
    out = OpenAISummarizer(opts(server)).summarize(REQ)
    assert out == "Goal: fix AUTH-7."
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["auth"] == "Bearer sk-test-123"
    assert req["body"]["model"] == "tiny" and req["body"]["max_tokens"] == 300
    prompt = req["body"]["messages"][1]["content"]
    assert "file paths, identifiers" in prompt and "- never push" in prompt
    assert (
        "Existing summary:\nearlier" in prompt and "[assistant calls read_file (call_1)]" in prompt
    )


def test_context_length_exceeded_is_detected_and_history_kept(server):
    server.mode = "overflow"
    with pytest.raises(openai.BadRequestError) as info:
        OpenAISummarizer(opts(server)).summarize(REQ)
    assert is_context_overflow(info.value) and parse_limit(info.value) == 8192
    c = Conv().system("s").user("task")
    for k in range(5):
        c.step(("read_file", {"path": f"f{k}.py"}, "z" * 500))
    units = c.user("go").units()

    def factory(name, options):
        assert name == "openai"
        return OpenAISummarizer(OpenAISummarizerOptions(**options))

    ctx = make_ctx(units, summarizer=factory)
    layer = Summarize(
        SummarizeOptions(
            summarizer="openai", summarizer_options=opts(server).model_dump(), keep_recent_rounds=1
        )
    )
    res = layer.apply(ctx, units)
    assert res.units == units
    assert res.report["failed"].startswith("BadRequestError")
    assert ctx.emit[0]["type"] == "summarizer.failed"
    server.mode = "ok"
    ok = layer.apply(ctx, units)
    assert (
        ok.units[2].kind == "summary" and ok.units[2].messages[0]["content"] == "Goal: fix AUTH-7."
    )


def test_key_never_in_options():
    with pytest.raises(ValidationError):
        OpenAISummarizerOptions(api_key_env="sk-live-abc")
    with pytest.raises(ValidationError):
        OpenAISummarizerOptions(api_key="x")


def test_a_long_fold_makes_at_most_max_chunks_calls_to_the_llm(server):
    """A history compacted at once (an imported conversation, say) costs at most
    ``max_chunks`` paid summary calls, the newest chunks, opened by the task."""
    c = Conv().system("s").user("task")
    c.step(("read_file", {"path": "first.py"}, "a" * 400))
    c.user("Also keep the public API stable")
    for k in range(60):
        c.step(("read_file", {"path": f"f{k}.py"}, f"{k % 10}" * 1500))
    units = c.user("go").units()
    ctx = make_ctx(units, summarizer=lambda name, o: OpenAISummarizer(OpenAISummarizerOptions(**o)))
    layer = Summarize(
        SummarizeOptions(
            summarizer="openai",
            summarizer_options=opts(server).model_dump(),
            keep_recent_rounds=1,
            max_input_tokens=1024,
            max_summary_tokens=100,
            max_chunks=4,
        )
    )
    res = layer.apply(ctx, units)
    assert res.units[2].kind == "summary"
    assert len(server.requests) == res.report["chunks"] == 4
    assert res.report["unread_units"] > 40
    first = server.requests[0]["body"]["messages"][1]["content"]
    assert "Also keep the public API stable" in first


def test_the_summary_call_continues_the_live_prompt(server):
    """Given the live prompt, the summarizer sends it unchanged (a cache read at the
    provider) and one instruction after it: what to fold, the task state's sections."""
    from ctxpolicy.conversation import render

    c = Conv().system("You are a SQL agent.").user("Best month of 2023?")
    for k in range(4):
        c.step(("sql_query", {"sql": f"SELECT {k}"}, "m,v\n1,2\n" * 20))
    units = c.user("Answer now.").units()
    ctx = make_ctx(units, summarizer=lambda name, o: OpenAISummarizer(OpenAISummarizerOptions(**o)))
    layer = Summarize(
        SummarizeOptions(
            summarizer="openai", summarizer_options=opts(server).model_dump(), keep_recent_rounds=1
        )
    )
    res = layer.apply(ctx, units)
    assert res.units[2].kind == "summary"
    (req,) = server.requests
    sent = req["body"]["messages"]
    assert sent[:-1] == json.loads(json.dumps(render(units)))  # the prompt, byte for byte
    last = sent[-1]
    assert last["role"] == "user" and last["content"].startswith("Do not continue the task.")
    kept_from = sum(len(u.messages) for u in units[: len(units) - 2])
    assert f"not including, message {kept_from + 1}" in last["content"]
    assert "User instructions (verbatim)" in last["content"] and "Next action" in last["content"]
    # the summary is repaired: the user's turn it folded is in it verbatim
    assert "Best month of 2023?" not in res.units[2].messages[0]["content"]  # pinned: kept
    assert res.report["input_tokens"] == ctx.count(units)
