"""The ``ctxpolicy`` command line (click).

Subcommands load lazily: the group knows each one as ``name -> "module:attr"`` in
:data:`LAZY_COMMANDS` and imports the module only when that command runs (or when
``--help`` lists commands). ``ctxpolicy validate`` therefore never imports the
engine or tiktoken. Adding a command is one line in :data:`LAZY_COMMANDS`; a
command whose module is not installed (not written yet) is simply absent.

Exit codes of every command: 0 success/valid, 1 problems found, 2 usage or
internal error. No input produces a traceback: unexpected exceptions are reported
in one line and exit 2.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import click

__all__ = ["LAZY_COMMANDS", "LazyGroup", "main"]

#: Subcommands: name -> "module:attribute". Missing modules are skipped.
LAZY_COMMANDS: dict[str, str] = {
    "validate": "ctxpolicy.cli.validate:validate",
    "explain": "ctxpolicy.cli.explain:explain",
    "convert": "ctxpolicy.cli.convert:convert",
    "schema": "ctxpolicy.cli.schema:schema",
    "plugins": "ctxpolicy.cli.plugins:plugins",
    "simulate": "ctxpolicy.cli.simulate:simulate",
    "snapshots": "ctxpolicy.cli.snapshots:snapshots",
    "tune": "ctxpolicy.cli.tune:tune",
    "init": "ctxpolicy.cli.init:init",
    "init-plugin": "ctxpolicy.cli.init_plugin:init_plugin",
    "serve": "ctxpolicy.cli.serve:serve",
    "report": "ctxpolicy.cli.report:report",
}


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def __init__(self, *args: Any, lazy_commands: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(super().list_commands(ctx))
        for name, target in self.lazy_commands.items():
            if _module_exists(target.partition(":")[0]):
                names.add(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd = super().get_command(ctx, cmd_name)
        if cmd is not None:
            return cmd
        target = self.lazy_commands.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # not written / not installed: no such command
                return None
            return _broken_command(cmd_name, exc)
        except Exception as exc:
            return _broken_command(cmd_name, exc)
        command = getattr(module, attr, None)
        if not isinstance(command, click.Command):
            return _broken_command(cmd_name, TypeError(f"{target} is not a click command"))
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            raise click.Abort() from None
        except BrokenPipeError:  # `ctxpolicy plugins | head -1`: the reader has enough
            _quiet_closed_stdout()
            ctx.exit(0)
        except Exception as exc:  # never a traceback: one line, exit 2
            click.echo(f"ctxpolicy: internal error: {type(exc).__name__}: {exc}", err=True)
            ctx.exit(2)


def _quiet_closed_stdout() -> None:
    """After the reader of stdout went away (a closed pipe): send what is still to be
    written, and the interpreter's last flush, to the null device, so the command ends
    quietly instead of with a second ``BrokenPipeError`` at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (a test runner)
        pass


def _broken_command(name: str, exc: BaseException) -> click.Command:
    """A stand-in for a subcommand whose module fails to import."""

    def run() -> None:
        click.echo(f"ctxpolicy {name}: cannot load command: {type(exc).__name__}: {exc}", err=True)
        sys.exit(2)

    return click.Command(
        name,
        callback=run,
        help=f"(unavailable: {exc})",
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def _version() -> str:
    from ctxpolicy import __version__

    return __version__


@click.group(
    cls=LazyGroup,
    lazy_commands=LAZY_COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(_version(), "--version", prog_name="ctxpolicy")
def main() -> None:
    """Declarative context-window policies for LLM agents.

    Exit codes: 0 valid / success, 1 problems found, 2 usage or internal error.
    """
