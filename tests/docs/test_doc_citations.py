"""No doc cites a file that is not in the repository: links, and paths of the repository's folders."""

from __future__ import annotations

import re
from pathlib import Path

from doc_files import DOCS, ROOT

LINK = re.compile(r"\]\(([\w./-]+)(?:#[^)]*)?\)")
QUOTED = re.compile(r"`((?:\.\./|[\w.-]+/)[\w./-]*\.(?:md|py|json|toml|txt|yaml|proto|ini))`")
"""A quoted path with a folder in it (a bare `node-credential.json` is a file on a node, not a citation)."""
PATH = re.compile(
    r"(?<![\w/.-])((?:src|tests|docs|examples|bench)/[\w./-]*\w|Dockerfile(?:\.bcd)?|Makefile|BENCHMARKS\.md)"
)
PACKAGE = ROOT / "src" / "better_compute"


def _exists(cited: str, doc: Path) -> bool:
    """Relative to the doc, to the repository root, or (a module path such as `wire/protocol.py`) to the package."""
    return any((base / cited).exists() for base in (doc.parent, ROOT, PACKAGE))


def citations(doc: Path) -> set[str]:
    text = doc.read_text()
    links = {target for target in LINK.findall(text) if "://" not in target and not target.startswith("mailto:")}
    return links | set(PATH.findall(text)) | set(QUOTED.findall(text))


def test_every_cited_file_is_in_the_repository() -> None:
    missing = [f"{doc.relative_to(ROOT)}: {cited}" for doc in DOCS for cited in sorted(citations(doc))]
    missing = [m for m in missing if not _exists(m.split(": ", 1)[1], ROOT / m.split(": ", 1)[0])]
    assert missing == []


def test_the_check_sees_links_and_paths(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("See [x](missing.md#a), `src/better_compute/nope.py`, `spec/guide.md` and tests/e2e/e2e_world.py.\n")
    assert citations(doc) == {"missing.md", "src/better_compute/nope.py", "spec/guide.md", "tests/e2e/e2e_world.py"}
    assert not _exists("missing.md", doc) and _exists("tests/e2e/e2e_world.py", doc)
