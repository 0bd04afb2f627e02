"""The suite's pytest defaults that its running time depends on (docs/testing.md, where the suite's time goes)."""

from __future__ import annotations

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_workers_steal_work_so_none_idles_while_another_has_a_queue() -> None:
    from xdist.scheduler import WorkStealingScheduling  # the installed xdist has the scheduler

    assert WorkStealingScheduling is not None
    options = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert options[options.index("--dist") + 1] == "worksteal"
