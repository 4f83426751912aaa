"""``openai`` — a summary written by any OpenAI-compatible chat endpoint.

Uses the official ``openai`` SDK (imported lazily, so validating a policy does not
need it). ``base_url`` points it at OpenAI, Azure-compatible gateways, vLLM,
SGLang, Ollama, LiteLLM, ...; the API key is read from the environment variable
named by ``api_key_env`` — a policy file never contains the key itself. Given the
live prompt (``SummaryRequest.prefix``) it sends that prompt unchanged and one
instruction after it, so the endpoint reads the conversation from its prompt cache;
otherwise a transcript (:mod:`ctxpolicy.summarizers.prompt`). The summary has the
sections of the engine's task state. Any error of
the SDK (including a 400 ``context_length_exceeded``) propagates: the ``summarize``
layer counts it as a failure and leaves history untouched.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, field_validator

from ctxpolicy.components import ComponentOptions, Summarizer, SummaryRequest
from ctxpolicy.plugins import hookimpl
from ctxpolicy.summarizers.prompt import build_prompt, prefix_messages

SYSTEM = "You compress agent conversation histories into faithful, exact summaries."


class OpenAISummarizerOptions(ComponentOptions):
    """Options of the ``openai`` summarizer."""

    model: str = Field(default="gpt-4o-mini", description="Model id sent to the endpoint.")
    base_url: str | None = Field(
        default=None, description="Endpoint base URL (unset: the SDK default / `OPENAI_BASE_URL`)."
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Name of the environment variable holding the API key (never the key itself).",
    )
    timeout_s: float = Field(default=60.0, gt=0, description="HTTP timeout of one call.")
    max_tokens: int | None = Field(
        default=None,
        gt=0,
        description="Completion limit sent to the endpoint (unset: the request's max_tokens).",
    )
    temperature: float = Field(default=0.0, ge=0, le=2, description="Sampling temperature.")
    max_retries: int = Field(default=0, ge=0, le=5, description="SDK retries on transient errors.")

    @field_validator("api_key_env")
    @classmethod
    def _not_a_key(cls, v: str) -> str:
        if v.startswith("sk-"):
            raise ValueError("api_key_env names an environment variable; do not put the key here")
        return v


class OpenAISummarizer(Summarizer):
    name = "openai"
    description = "Summary by an OpenAI-compatible chat endpoint."
    Options = OpenAISummarizerOptions
    options: OpenAISummarizerOptions
    uses_prefix = True  # the live prompt + one instruction: a cache read

    def __init__(self, options: ComponentOptions | None = None, *, client: Any = None) -> None:
        super().__init__(options)
        self._client = client

    def client(self) -> Any:
        if self._client is None:
            import openai  # lazy: optional dependency

            opts = self.options
            key = os.environ.get(opts.api_key_env) or "not-set"
            self._client = openai.OpenAI(
                api_key=key,
                base_url=opts.base_url,
                timeout=opts.timeout_s,
                max_retries=opts.max_retries,
            )
        return self._client

    def summarize(self, request: SummaryRequest) -> str:
        opts = self.options
        messages = (
            prefix_messages(request)
            if request.prefix is not None
            else [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": build_prompt(request)},
            ]
        )
        resp = self.client().chat.completions.create(
            model=opts.model,
            messages=messages,
            max_tokens=opts.max_tokens or request.max_tokens,
            temperature=opts.temperature,
        )
        choice = resp.choices[0] if resp.choices else None
        text = choice.message.content if choice is not None and choice.message is not None else None
        if not isinstance(text, str):
            raise ValueError("endpoint returned no text")
        return text.strip()


@hookimpl
def ctxpolicy_register_summarizers(register):  # type: ignore[no-untyped-def]
    register(OpenAISummarizer)
