"""Running the docs' shell blocks: each in one bash, in a scratch directory, every command's exit
status checked (the markers are described in test_doc_commands.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from doc_files import ROOT, Block, shell_blocks

__all__ = ["BLOCKS", "MARKERS", "base_env", "ids", "of", "run_block", "scratch"]

BIN = Path(sys.executable).parent
MARKERS = {"sandbox", "live", "kept-world-fixture", "make", "not-run"}
BLOCKS = shell_blocks()


def ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


def of(*markers: str) -> list[Block]:
    return [b for b in BLOCKS if (b.marker or "sandbox") in markers]


def run_block(block: Block, workdir: Path, env: dict[str, str]) -> None:
    commands = block.commands()
    assert commands, f"{block.where}: a shell block without commands"
    rc_file = workdir / ".doctest-rc"
    script = "\n".join(f'{command}\necho "{i} $?" >> {rc_file}' for i, command in enumerate(commands))
    result = subprocess.run(
        ["bash", "-c", script],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    output = result.stdout + result.stderr
    codes = dict(line.split() for line in rc_file.read_text().splitlines()) if rc_file.exists() else {}
    for i, command in enumerate(commands):
        allowed = {"0", "2"} if command.startswith("better-compute fleet plan") else {"0"}
        assert codes.get(str(i)) in allowed, f"{block.where}: `{command}` exited {codes.get(str(i))}:\n{output[-3000:]}"
    assert "Traceback" not in output and "internal error" not in output, f"{block.where}:\n{output[-3000:]}"


def scratch(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    shutil.copytree(ROOT / "examples", workdir / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    (workdir / "do-token.txt").write_text("dop_v1_" + "0" * 64 + "\n")
    return workdir


def base_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BC_", "AWS_", "GOOGLE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["BC_DATA_DIR"] = str(tmp_path / "data")
    return env
