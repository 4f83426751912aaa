"""Every registered layer and preprocessor (built-ins and installed plugins) passes
the conformance suite plugin authors are asked to pass."""

from __future__ import annotations

from ctxpolicy.plugins import get_registry
from ctxpolicy.testing import conformance

_registry = get_registry()

# One class per component, bound at module level so pytest collects it: the same
# one-line shape a plugin author uses.
for _name in _registry.names("layer"):
    globals()[f"TestLayer_{_name}"] = conformance.layer_suite(_name)
for _name in _registry.names("preprocessor"):
    globals()[f"TestPreprocessor_{_name}"] = conformance.preprocessor_suite(_name)


def test_builtin_layers_are_covered() -> None:
    names = set(_registry.names("layer"))
    assert {"observation_mask", "drop_rounds", "emergency"} <= names
