"""``ctxpolicy serve``: the policy-driven OpenAI/Anthropic-compatible gateway (docs/gateway.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys

import click

__all__ = ["KEEP_ALIVE_S", "serve"]

#: Seconds an idle client connection is kept open. Longer than the clients' own pool
#: expiry (httpx and the OpenAI/Anthropic SDKs: 5 s), so a client never reuses a
#: connection the gateway is closing at that moment (a lost request).
KEEP_ALIVE_S = 75


def _extra() -> str:
    from ctxpolicy._install import extra_hint

    return f"ctxpolicy serve needs the gateway extra (starlette, uvicorn, httpx): {extra_hint('gateway')}"


@click.command("serve")
@click.option(
    "--policy",
    "policy",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    help="Policy file (YAML or TOML); every agent in it is served.",
)
@click.option(
    "--agent",
    default=None,
    help="Agent type of requests that name none (no /agents/{name} prefix, no "
    "X-Ctxpolicy-Agent header). Without it such requests get a 404 naming the agents.",
)
@click.option(
    "--upstream",
    required=True,
    help="Provider base URL for OpenAI-compatible calls and unknown paths, e.g. "
    "https://api.openai.com (a trailing /v1 is accepted).",
)
@click.option(
    "--anthropic-upstream",
    default=None,
    help="Provider base URL for POST /v1/messages (default: --upstream), e.g. "
    "https://api.anthropic.com.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8787, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 256),
    help="Worker processes. Above 1, give the policy a shared state store "
    "(state: {store: postgres}) so a conversation resumes on any worker.",
)
@click.option(
    "--recall/--no-recall",
    default=False,
    show_default=True,
    help="Offer ctx_recall/ctx_search to the model and answer those calls inside the "
    "gateway, streamed or not (a streamed answer reaches the client once it is not a "
    "recall-only call).",
)
@click.option(
    "--recall-rounds",
    default=4,
    show_default=True,
    type=click.IntRange(0, 32),
    help="Most recall-only rounds answered inside the gateway per request.",
)
@click.option(
    "--stream-usage/--no-stream-usage",
    default=True,
    show_default=True,
    help="Ask OpenAI-style upstreams for the usage chunk of a stream "
    "(stream_options.include_usage) so record_usage gets the provider's prompt tokens; "
    "the chunk is kept from clients that did not ask for it.",
)
@click.option(
    "--api-key-env",
    default=None,
    metavar="NAME",
    help="Environment variable holding a server-side provider key, sent upstream instead "
    "of the client's credential (the client's credential still separates tenants).",
)
@click.option(
    "--max-body-bytes",
    default=32 * 1024 * 1024,
    show_default=True,
    type=click.IntRange(1024, None),
    help="Largest request body accepted; larger ones get HTTP 413.",
)
@click.option(
    "--max-sessions",
    default=4096,
    show_default=True,
    type=click.IntRange(1, None),
    help="Conversations kept open per worker (least recently used closed; they resume "
    "from the state store).",
)
@click.option(
    "--keep-alive",
    default=KEEP_ALIVE_S,
    show_default=True,
    type=click.IntRange(1, 3600),
    help="Seconds an idle client connection stays open. Keep it above the clients' own "
    "keep-alive expiry (5 s in httpx and the OpenAI/Anthropic SDKs), else a request sent "
    "on a connection the gateway is closing fails.",
)
@click.option(
    "--record",
    "record",
    default=None,
    type=click.Path(file_okay=False, writable=True),
    help="Record every conversation as a trace `ctxpolicy simulate` and `tune` replay: "
    "DIR gets one <conversation>.jsonl per conversation (append-only, 0600), the messages "
    "as the client sent them, tool results raw. Created if missing.",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=False,
    show_default=True,
    help="Serve a live page at /dashboard: each conversation's context over time, its "
    "compactions and the layer that fired, tokens and estimated cost saved, prompt-cache "
    "reads and writes, overflows, requests forwarded unprepared, upstream latency. "
    "Numbers and names only; with client tokens its data needs one (docs/observability.md).",
)
@click.option(
    "--events",
    "events",
    default=None,
    type=click.Path(dir_okay=False, writable=True),
    help="Append every session's events to this file, one JSON object per line with its "
    "agent (numbers and names, as JsonlEventSink writes them): `ctxpolicy report FILE` "
    "shows them. Workers append to the same file.",
)
@click.option(
    "--log-level",
    default="warning",
    show_default=True,
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    help="uvicorn log level.",
)
def serve(
    policy: str,
    agent: str | None,
    upstream: str,
    anthropic_upstream: str | None,
    host: str,
    port: int,
    workers: int,
    recall: bool,
    recall_rounds: int,
    stream_usage: bool,
    api_key_env: str | None,
    max_body_bytes: int,
    max_sessions: int,
    keep_alive: int,
    record: str | None,
    dashboard: bool,
    events: str | None,
    log_level: str,
) -> None:
    """Run the policy-driven gateway: point any OpenAI- or Anthropic-compatible client's
    base URL at it (http://HOST:PORT/v1, or http://HOST:PORT/agents/NAME/v1).

    Set CTXPOLICY_GATEWAY_SECRET to the same value on every worker and machine of a
    fleet, so conversations without an X-Ctxpolicy-Conversation header get the same id
    everywhere (without it a random per-start secret is used and printed nowhere).
    """
    for mod in ("starlette", "uvicorn", "httpx"):
        if importlib.util.find_spec(mod) is None:
            click.echo(f"ctxpolicy serve: {_extra()}", err=True)
            sys.exit(2)
    for url in (upstream, anthropic_upstream):
        if url is not None and not url.startswith(("http://", "https://")):
            raise click.BadParameter(f"not an http(s) URL: {url!r}", param_hint="--upstream")
    if api_key_env and not os.environ.get(api_key_env):
        raise click.BadParameter(
            f"environment variable {api_key_env} is not set or empty", param_hint="--api-key-env"
        )

    from ctxpolicy.policy.resolve import list_agents, resolve_all

    policies, diags = resolve_all(policy)
    errors = [d for d in diags if d.severity == "error"]
    for d in errors:
        click.echo(d.format(), err=True)
    if not policies:
        click.echo(f"ctxpolicy serve: {policy}: no agent resolves without errors", err=True)
        sys.exit(1)
    unserved = [a for a in list_agents(policy) if a not in policies]
    if unserved:  # the others are served; these answer 404 until the file is fixed
        click.echo(
            f"ctxpolicy serve: not serving {', '.join(unserved)} (errors above); "
            f"serving {', '.join(sorted(policies))}",
            err=True,
        )
    if agent is not None and agent not in policies:
        raise click.BadParameter(
            f"unknown agent {agent!r}; agents: {', '.join(sorted(policies))}",
            param_hint="--agent",
        )
    if record:
        try:
            os.makedirs(record, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise click.BadParameter(
                f"cannot create the directory {record!r}: {exc.strerror or exc}",
                param_hint="--record",
            ) from None
    os.environ.setdefault("CTXPOLICY_GATEWAY_SECRET", secrets.token_hex(32))
    os.environ["CTXPOLICY_GATEWAY_CONFIG"] = json.dumps(
        {
            "policy": os.path.abspath(policy),
            "upstream": upstream,
            "anthropic_upstream": anthropic_upstream,
            "default_agent": agent,
            "recall": recall,
            "recall_rounds": recall_rounds,
            "stream_usage": stream_usage,
            "api_key_env": api_key_env,
            "max_body_bytes": max_body_bytes,
            "max_sessions": max_sessions,
            "record": os.path.abspath(record) if record else None,
            "dashboard": dashboard,
            "events": os.path.abspath(events) if events else None,
        }
    )
    import uvicorn

    click.echo(
        f"ctxpolicy serve: agents {', '.join(sorted(policies))} on http://{host}:{port} "
        f"-> {upstream}"
        + (f" (anthropic {anthropic_upstream})" if anthropic_upstream else "")
        + (f"; dashboard http://{host}:{port}/dashboard" if dashboard else ""),
        err=True,
    )
    uvicorn.run(
        "ctxpolicy.gateway.app:create_app_from_env",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        access_log=False,
        timeout_keep_alive=keep_alive,
    )
