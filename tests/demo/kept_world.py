"""One `better-compute demo --json --keep` for test_demo.py: its summary and the environment it prints.

The demo runs as a user runs it (a subprocess, from the repository root); once it prints
its summary it keeps serving until the fixture sends SIGINT, and must then stop cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
STARTUP_SECONDS = 600
"""How long the story may take to reach its summary on a loaded 2-core machine (it needs well under a minute)."""


@dataclass
class KeptWorld:
    summary: dict[str, Any]
    env: dict[str, str]

    def environ(self) -> dict[str, str]:
        """The process environment with the kept world's variables (and the venv's bin on PATH)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BC_")}
        env.update(self.env)
        env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
        return env


def _read_first_line(process: subprocess.Popen[str], timeout: float) -> str:
    found: list[str] = []
    reader = threading.Thread(target=lambda: found.append(process.stdout.readline() if process.stdout else ""))
    reader.start()
    reader.join(timeout)
    if not found or not found[0]:
        process.kill()
        _, stderr = process.communicate()
        raise AssertionError(f"the demo printed no summary (exit {process.returncode}): {stderr[-4000:]}")
    return found[0]


@pytest.fixture(scope="module")
def kept_world() -> Iterator[KeptWorld]:
    """Module scope, so the world stops once test_demo.py's tests are done: tests/demo has no __init__.py,
    and a package-scoped fixture there lived until the session ended, a seventh of a core all the while."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BC_")}
    process = subprocess.Popen(
        [str(BIN / "better-compute"), "demo", "--json", "--keep"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        summary = json.loads(_read_first_line(process, STARTUP_SECONDS))
        yield KeptWorld(summary, summary["kept"])
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert process.returncode == 0, f"the kept demo did not stop cleanly on SIGINT: {stderr[-4000:]}"
