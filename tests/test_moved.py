"""Old import paths of the modules moved in 0.2 still work for one release (issue 26)."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from ctxpolicy._moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_path_is_the_new_module(old: str) -> None:
    with pytest.warns(DeprecationWarning, match=MOVED[old]):
        code = f"import importlib, warnings; warnings.simplefilter('error'); importlib.import_module({old!r})"
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert res.returncode != 0 and "DeprecationWarning" in res.stderr
        sys.modules.pop(old, None)
        mod = importlib.import_module(old)
    assert mod is importlib.import_module(MOVED[old])


def test_old_module_names_of_the_packages_still_export() -> None:
    from ctxpolicy.conversation import Unit, content_text, to_units  # was conversation.py
    from ctxpolicy.snapshots import FsspecStore, LocalStore, prune  # was snapshots.py

    assert callable(content_text) and callable(to_units) and callable(prune)
    assert Unit and LocalStore.name == "local" and FsspecStore.name == "fsspec"


def test_no_code_of_ours_uses_an_old_path() -> None:
    """The package, its tests, benchmarks and examples import moved modules by their new
    path (the aliases are for users' code)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    old = "|".join(re.escape(name) for name in MOVED)
    pattern = re.compile(rf"(?:from|import)\s+({old})\b(?!\.)")
    found = [
        f"{path.relative_to(root)}: {m.group(1)}"
        for part in ("ctxpolicy", "tests", "benchmarks", "examples")
        for path in (root / part).rglob("*.py")
        if path.name not in ("_moved.py", "test_moved.py")
        for m in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


def test_no_code_of_ours_uses_a_moved_name() -> None:
    """Names that left a module (layers.emergency's overflow detector) are imported from
    their new home too."""
    import re
    from pathlib import Path

    from ctxpolicy.layers import emergency

    root = Path(__file__).resolve().parents[1]
    names = "|".join(re.escape(name) for name in emergency._MOVED)
    pattern = re.compile(rf"from\s+ctxpolicy\.layers\.emergency\s+import\s+[^\n]*\b({names})\b")
    found = [
        f"{path.relative_to(root)}: {m.group(1)}"
        for part in ("ctxpolicy", "tests", "benchmarks", "examples", "docs")
        for path in (root / part).rglob("*.py")
        if path.name != "test_moved.py"
        for m in pattern.finditer(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


#: names that left a built-in plugin module for a host module (issue 26 change 4), still
#: importable from the plugin module for one release: old module -> (new module, names)
MOVED_NAMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "ctxpolicy.preprocessors.redact": (
        "ctxpolicy.conversation.redact",
        ("BUILTIN_PATTERNS", "DEFAULT_KEYS", "HINTS", "Redactor", "default_redactor"),
    ),
    "ctxpolicy.summarizers.callable": (
        "ctxpolicy.components",
        (
            "CallableOptions",
            "CallableSummarizer",
            "SummaryFn",
            "register_callable",
            "registered_callables",
            "unregister_callable",
        ),
    ),
    "ctxpolicy.layers._util": (
        "ctxpolicy.conversation.refs",
        ("REF_LINE", "REF_MARK", "meta_ref_for", "split_refs", "unit_refs"),
    ),
    "ctxpolicy.layers._util ": (  # a second new home of the same old module
        "ctxpolicy.conversation.cut",
        (
            "ELISION",
            "approx_tokens",
            "describe_call",
            "first_meaningful_line",
            "head_tail",
            "short",
            "truncate_keep_refs",
        ),
    ),
    "ctxpolicy.layers._util  ": ("ctxpolicy.conversation.messages", ("with_text",)),
}


@pytest.mark.parametrize("old", sorted(MOVED_NAMES))
def test_moved_names_are_the_host_objects(old: str) -> None:
    new, names = MOVED_NAMES[old]
    old_mod, new_mod = importlib.import_module(old.strip()), importlib.import_module(new)
    for name in names:
        assert getattr(old_mod, name) is getattr(new_mod, name), name


def test_renamed_names_keep_their_old_name_for_one_release() -> None:
    from ctxpolicy.engine import ledger

    assert ledger.Ledger is ledger.ProgressLedger
