"""Every doctor and self-check code the code can report is in docs/operations.md, and nothing else is."""

from __future__ import annotations

import re

from doc_files import ROOT

FINDING = re.compile(r"Finding\(\s*\"([a-z]+\.[a-z0-9-]+)\"")
DOCUMENTED = re.compile(r"^\| `([a-z]+\.[a-z0-9-]+)` \| (error|warning|info) \|", re.MULTILINE)


def codes_in_the_code() -> set[str]:
    return {code for path in (ROOT / "src").rglob("*.py") for code in FINDING.findall(path.read_text())}


def test_every_code_is_documented_with_what_to_do() -> None:
    in_code = codes_in_the_code()
    documented = set(DOCUMENTED.findall((ROOT / "docs" / "operations.md").read_text()))
    assert len(in_code) >= 14, "the scan finds the findings (a pattern that matched nothing would pass vacuously)"
    assert in_code - {code for code, _ in documented} == set(), "add these codes to docs/operations.md"
    assert {code for code, _ in documented} - in_code == set(), "these documented codes are no longer reported"


def test_the_documented_severity_is_the_code_s() -> None:
    text = "\n".join(path.read_text() for path in (ROOT / "src").rglob("*.py"))
    for code, severity in DOCUMENTED.findall((ROOT / "docs" / "operations.md").read_text()):
        said = re.search(rf"\"{re.escape(code)}\",\s*\"(error|warning|info)\"", text)
        assert said is not None and said.group(1) == severity, code
