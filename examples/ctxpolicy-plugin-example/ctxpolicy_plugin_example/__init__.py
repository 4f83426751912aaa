"""An example third-party ctxpolicy plugin.

Provides the ``keep_errors`` layer and the ``html_text`` preprocessor. The two
hook implementations below are all ctxpolicy needs; the entry point in
pyproject.toml (group ``ctxpolicy``) makes ctxpolicy find this module.
"""

from __future__ import annotations

from collections.abc import Callable

from ctxpolicy import hookimpl
from ctxpolicy_plugin_example.html_text import HtmlText, HtmlTextOptions
from ctxpolicy_plugin_example.keep_errors import KeepErrors, KeepErrorsOptions

__all__ = ["HtmlText", "HtmlTextOptions", "KeepErrors", "KeepErrorsOptions"]
__version__ = "0.1.0"


@hookimpl
def ctxpolicy_register_layers(register: Callable[[type], None]) -> None:
    register(KeepErrors)


@hookimpl
def ctxpolicy_register_preprocessors(register: Callable[[type], None]) -> None:
    register(HtmlText)
