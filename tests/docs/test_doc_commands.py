"""Every shell command in README.md and docs/ is run here, so the docs cannot rot.

Each fenced sh/console block carries a marker comment on the line before it (none means
`sandbox`):

- `sandbox`: the block's commands run in order in one bash, in a scratch directory holding a
  copy of examples/, a `do-token.txt`, and an empty data directory (BC_DATA_DIR), with the
  project's `better-compute` and `bcd` on PATH.
- `live`: the same, with the environment `better-compute demo --keep` prints (the kept world);
  tests/demo/test_demo.py runs these, beside the kept world's other tests.
- `kept-world-fixture`: `better-compute demo --keep`, which the kept_world fixture runs (with --json).
- `make`: `make TARGET`, checked with `make -n` (running `make test` inside the tests would recurse).
- `not-run: REASON`: needs what this machine has not (cloud accounts, a registry, docker's network);
  the reason is required and shown.

Every command must exit 0, except `better-compute fleet plan`, which may exit 2 (changes are
pending, as documented); none may print a traceback or an internal error.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from doc_files import ROOT, Block
from doc_shell import BLOCKS, MARKERS, base_env, ids, of, run_block, scratch


def test_every_shell_block_has_a_known_marker() -> None:
    assert len(BLOCKS) >= 10, "the docs' shell blocks are found"
    unknown = [f"{b.where}: {b.marker}" for b in BLOCKS if b.marker is not None and b.marker not in MARKERS]
    assert unknown == []
    unexplained = [b.where for b in of("not-run") if not b.reason]
    assert unexplained == [], "a block that is not run says why"


@pytest.mark.parametrize("block", of("sandbox"), ids=ids(of("sandbox")))
def test_sandbox_commands_run(block: Block, tmp_path: Path) -> None:
    run_block(block, scratch(tmp_path), base_env(tmp_path))


def test_the_kept_world_command_is_the_fixture_s() -> None:
    for block in of("kept-world-fixture"):
        assert block.commands() == ["better-compute demo --keep"], block.where


@pytest.mark.parametrize("block", of("make"), ids=ids(of("make")))
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
