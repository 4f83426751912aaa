"""Components a policy names, looked up in the plugin registry.

An unknown name is CTX102 with a did-you-mean, the known names, and — when a plugin
failed to import or register — that plugin and its error (it may be the one that
provides the name). Options are validated by the component's own ``Options`` model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from ctxpolicy.policy.diagnostics import dotted, suggestion, validation_findings
from ctxpolicy.policy.models import ModelSpec
from ctxpolicy.policy.source import PathT

__all__ = ["BARE_ENCODINGS", "check_component", "check_tokenizers", "failed_plugins"]

#: ``emit(path, code, message, hint)``
Emit = Callable[[PathT, str, str, str | None], None]

#: Bare encoding names accepted in ``model.tokenizer`` (meaning ``tiktoken:<name>``).
BARE_ENCODINGS = frozenset(
    {"o200k_base", "cl100k_base", "p50k_base", "p50k_edit", "r50k_base", "gpt2"}
    | {"o200k_harmony", "llama3", "qwen3"}  # quicktok's bundled vocabularies
)


def failed_plugins(registry: Any) -> str:
    """``; plugin 'p' failed to load (error), it may provide it`` for every plugin
    that could not be imported or registered: an unknown name is then not
    necessarily a typo. Empty when every plugin loaded."""
    failed = [p for p in registry.problems if p.message.startswith("failed to")]
    if not failed:
        return ""
    parts = [f"plugin {p.plugin!r} {p.message}" for p in failed]
    what = "it" if len(failed) == 1 else "one of them"
    return "; " + "; ".join(parts) + f" ({what} may provide it)"


def check_component(
    registry: Any,
    kind: Any,
    cname: str,
    options: dict[str, Any],
    base: PathT,
    key: str,
    emit: Emit,
    redact: Callable[[str], str] | None = None,
) -> dict[str, Any] | None:
    """The completed options of component ``cname`` of ``kind`` named at ``base``/``key``,
    or None after emitting why not (unknown name, invalid options)."""
    cls = registry.get(kind, cname)
    word = kind.replace("_", " ")  # snapshot_store -> "snapshot store"
    if cls is None:
        names = registry.names(kind)
        emit(
            (*base, key),
            "CTX102",
            f"unknown {word} {cname!r}{suggestion(cname, names)}" + failed_plugins(registry),
            f"known {word}s: " + (", ".join(names) or "(none registered)"),
        )
        return None
    opath = (*base, "options")
    try:
        model = cls.Options.model_validate(options)
        return dict(model.model_dump(mode="json"))
    except ValidationError as exc:
        for f in validation_findings(
            exc.errors(), options, cls.Options, lambda p: dotted((*opath, *p)), redact=redact
        ):
            emit((*opath, *f.path), f.code, f.message, f.hint)
        return None
    except Exception as exc:
        provider = registry.plugin_of(kind, cname)
        emit(
            opath,
            "CTX103",
            f"options of {word} {cname!r} could not be checked: {type(exc).__name__}: {exc}",
            f"reported by plugin {provider!r}" if provider else None,
        )
        return None


def check_tokenizers(registry: Any, spec: ModelSpec, base: PathT, emit: Emit) -> None:
    """Every backend of ``model.tokenizer`` (at ``base``) is registered."""
    tok = spec.tokenizer
    if tok is None:
        return
    entries = [tok] if isinstance(tok, str) else list(tok)
    for i, entry in enumerate(entries):
        p = base if isinstance(tok, str) else (*base, i)
        backend = entry.split(":", 1)[0].strip() if ":" in entry else entry.strip()
        if ":" not in entry and backend in BARE_ENCODINGS:
            backend = "tiktoken"
        if registry.get("tokenizer", backend) is None:
            names = registry.names("tokenizer")
            emit(
                p,
                "CTX102",
                f"unknown tokenizer {backend!r}"
                f"{suggestion(backend, [*names, *sorted(BARE_ENCODINGS)])}"
                + failed_plugins(registry),
                "use a registered backend (" + ", ".join(names) + ") or an encoding name "
                "such as o200k_base",
            )
