import sys
from pathlib import Path

# make tests/helpers_conv.py importable as `helpers_conv`
_tests = str(Path(__file__).resolve().parent.parent)
if _tests not in sys.path:
    sys.path.insert(0, _tests)
