"""Both images' Dockerfiles pass hadolint (installed with the dev extra); the build itself cannot run here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HADOLINT = Path(sys.executable).parent / "hadolint"


def test_the_dockerfiles_pass_hadolint() -> None:
    result = subprocess.run(
        [str(HADOLINT), "--no-color", "Dockerfile", "Dockerfile.bcd"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_finds_what_it_is_there_for(tmp_path: Path) -> None:
    """An unpinned apt-get and a root image fail: the check is live, not a formality."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\n")
    result = subprocess.run([str(HADOLINT), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3008" in result.stdout


def test_the_control_plane_image_runs_serve_as_a_user_not_root() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "\nUSER 10001\n" in text
    assert 'ENTRYPOINT ["better-compute"]' in text and 'CMD ["serve", "--host", "0.0.0.0"' in text
