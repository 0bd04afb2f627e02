"""Every shell command in README.md and docs/ is run here, so the docs cannot rot.

Each fenced sh/console block carries a marker comment on the line before it (none means
`sandbox`):

- `sandbox`: the block's commands run in order in one bash, in a scratch directory holding a
  copy of examples/, a `do-token.txt`, and an empty data directory (BC_DATA_DIR), with the
  project's `better-compute` and `bcd` on PATH.
- `live`: the same, with the environment `better-compute demo --keep` prints (the kept world).
- `kept-world-fixture`: `better-compute demo --keep`, which the kept_world fixture runs (with --json).
- `make`: `make TARGET`, checked with `make -n` (running `make test` inside the tests would recurse).
- `not-run: REASON`: needs what this machine has not (cloud accounts, a registry, docker's network);
  the reason is required and shown.

Every command must exit 0, except `better-compute fleet plan`, which may exit 2 (changes are
pending, as documented); none may print a traceback or an internal error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from doc_files import ROOT, Block, shell_blocks
from kept_world import KeptWorld

BIN = Path(sys.executable).parent
MARKERS = {"sandbox", "live", "kept-world-fixture", "make", "not-run"}
BLOCKS = shell_blocks()


def _ids(blocks: list[Block]) -> list[str]:
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


def test_every_shell_block_has_a_known_marker() -> None:
    assert len(BLOCKS) >= 10, "the docs' shell blocks are found"
    unknown = [f"{b.where}: {b.marker}" for b in BLOCKS if b.marker is not None and b.marker not in MARKERS]
    assert unknown == []
    unexplained = [b.where for b in of("not-run") if not b.reason]
    assert unexplained == [], "a block that is not run says why"


@pytest.mark.parametrize("block", of("sandbox"), ids=_ids(of("sandbox")))
def test_sandbox_commands_run(block: Block, tmp_path: Path) -> None:
    run_block(block, scratch(tmp_path), base_env(tmp_path))


def test_live_commands_run_against_the_kept_world(kept_world: KeptWorld, tmp_path: Path) -> None:
    blocks = of("live")
    assert blocks, "the quickstart has commands for the kept world"
    env = base_env(tmp_path)
    env.update(kept_world.env)
    for block in blocks:
        run_block(block, scratch(tmp_path / block.where.replace("/", "_")), env)


def test_the_kept_world_command_is_the_fixture_s() -> None:
    for block in of("kept-world-fixture"):
        assert block.commands() == ["better-compute demo --keep"], block.where


@pytest.mark.parametrize("block", of("make"), ids=_ids(of("make")))
def test_make_targets_resolve_to_the_documented_commands(block: Block) -> None:
    expected = {"demo": ['pip install --quiet -e ".[demo]"', "better-compute demo"], "test": ["pytest -q", "mypy"]}
    for command in block.commands():
        target = command.split("#")[0].split()[1]
        result = subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        for line in expected[target]:
            assert line in result.stdout, f"`make {target}` should run {line}:\n{result.stdout}"
