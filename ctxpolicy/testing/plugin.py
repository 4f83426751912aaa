"""pytest plugin of ctxpolicy (registered through the ``pytest11`` entry point).

Fixtures for plugin authors are added in :mod:`ctxpolicy.testing.fixtures`.
"""

from __future__ import annotations
