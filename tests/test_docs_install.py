"""Every install command the docs give works today (issue 31.2).

ctxpolicy is not on a package index yet, so ``pip install 'ctxpolicy[extra]'`` finds
nothing: a page must give the form that works (from a clone, ``./ctxpolicy[extra]``
or ``-e '.[extra]'``, README's Install section), and may name the index form only
where it says that it applies once a release is published.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: ``pip install`` of ctxpolicy by its index name, quoted or not, with extras or not
#: (``ctxpolicy[x] @ <url>`` is a direct reference and works)
INDEX_FORM = re.compile(r"pip install\s+['\"]?ctxpolicy(?:\[[\w,]+\])?(?!\s*@)(?:['\"\s`)]|$)")
#: ... or from a URL that no one has published
INVENTED_URL = re.compile(r"git\+https://github\.com/ctxpolicy/")
#: a line may name the index form when it says it applies once released
QUALIFIED = re.compile(r"release|not on")


def _fails_today(line: str) -> bool:
    if INVENTED_URL.search(line):
        return True
    return bool(INDEX_FORM.search(line)) and not QUALIFIED.search(line)


def test_no_page_gives_an_install_that_cannot_work() -> None:
    bad = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for page in PAGES
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if _fails_today(line)
    ]
    assert not bad, "install commands that fail today:\n" + "\n".join(bad)


def test_the_check_sees_the_forms_that_fail() -> None:
    assert _fails_today("pip install 'ctxpolicy[openai]'")
    assert _fails_today("pip install ctxpolicy")
    assert _fails_today("pip install 'ctxpolicy[x] @ git+https://github.com/ctxpolicy/ctxpolicy'")
    assert not _fails_today("pip install './ctxpolicy[openai]'   # from a clone")
    assert not _fails_today("pip install 'ctxpolicy[openai] @ git+<repository URL>'")
    assert not _fails_today("Once a release is published, `pip install 'ctxpolicy[openai]'`")
