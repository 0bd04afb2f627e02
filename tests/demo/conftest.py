"""The kept demo world lives in kept_world.py (a module name of its own: several test folders have a conftest).

test_demo.py runs the docs' `live` shell blocks through tests/docs/doc_shell.py, put on the path here.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))

from kept_world import kept_world

__all__ = ["kept_world"]
