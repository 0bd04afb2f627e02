"""What the suite's running time depends on in pytest's defaults and the Makefile (docs/testing.md, where the time goes)."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"


def test_workers_steal_work_so_none_idles_while_another_has_a_queue() -> None:
    from xdist.scheduler import WorkStealingScheduling  # the installed xdist has the scheduler

    assert WorkStealingScheduling is not None
    options = tomllib.loads(PYPROJECT.read_text())["tool"]["pytest"]["ini_options"]["addopts"].split()
    assert options[options.index("--dist") + 1] == "worksteal"


def test_make_s_recipes_write_bytecode_caches_whatever_the_environment_says(tmp_path: Path) -> None:
    probe = tmp_path / "probe.mk"
    probe.write_text(f'include {ROOT / "Makefile"}\nprobe:\n\t@echo "[$$PYTHONDONTWRITEBYTECODE]"\n')
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    made = subprocess.run(["make", "-s", "-f", str(probe), "probe"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip() == "[]"
