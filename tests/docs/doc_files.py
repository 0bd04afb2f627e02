"""The documents the docs tests read: README.md and every page in docs/, and their fenced blocks."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"^<!-- doctest: ([a-z-]+)(?::\s*(.*?))? -->$")


@dataclass
class Block:
    path: Path
    line: int
    language: str
    text: str
    marker: str | None
    reason: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[str]:
        """A console block's `$ ` lines (with their `\\` continuations); every line of a sh block but comments."""
        commands: list[str] = []
        lines = self.text.splitlines()
        index = 0
        while index < len(lines):
            line = lines[index]
            index += 1
            if self.language == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            elif not line.strip() or line.lstrip().startswith("#"):
                continue
            while line.endswith("\\") and index < len(lines):
                line = line[:-1] + lines[index].strip()
                index += 1
            commands.append(line)
        return commands


SHELL = {"sh", "bash", "console", "shell"}


def blocks(path: Path) -> list[Block]:
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        opened = _FENCE.match(lines[index])
        if not opened:
            index += 1
            continue
        start = index
        index += 1
        body: list[str] = []
        while index < len(lines) and not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1
        marker = _MARKER.match(lines[start - 1]) if start > 0 else None
        found.append(
            Block(
                path,
                start + 1,
                opened.group(1),
                "\n".join(body),
                marker.group(1) if marker else None,
                marker.group(2) if marker else None,
            )
        )
    return found


def shell_blocks() -> list[Block]:
    return [b for path in DOCS for b in blocks(path) if b.language in SHELL]
