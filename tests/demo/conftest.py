"""The kept demo world lives in kept_world.py (a module name of its own: several test folders have a conftest).

test_doc_commands.py reads the docs through tests/docs/doc_files.py, put on the path here.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs"))

from kept_world import kept_world

__all__ = ["kept_world"]
