"""bcd turns off the NVIDIA runtime's reading of unprivileged containers' own NVIDIA_VISIBLE_DEVICES."""

from __future__ import annotations

from pathlib import Path

from better_compute.bcd.runtime_config import refuse_unprivileged_env

SHIPPED = """#accept-nvidia-visible-devices-as-volume-mounts = false
accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false

[nvidia-container-cli]
environment = []
ldconfig = "@/sbin/ldconfig"

[nvidia-container-runtime]
log-level = "info"
"""


def test_the_settings_are_top_level_keys_written_before_the_first_table_once(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(SHIPPED)
    assert refuse_unprivileged_env(config)
    text = config.read_text()
    head = text.split("[nvidia-container-cli]")[0]
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in head
    assert "accept-nvidia-visible-devices-as-volume-mounts = true" in head
    assert text.count("accept-nvidia-visible-devices") == 2, "the shipped lines are replaced, not repeated"
    assert '[nvidia-container-runtime]\nlog-level = "info"' in text
    assert not refuse_unprivileged_env(config), "a second run changes nothing"


def test_a_node_without_the_nvidia_runtime_is_left_alone(tmp_path: Path) -> None:
    assert not refuse_unprivileged_env(tmp_path / "missing" / "config.toml")
    assert not (tmp_path / "missing").exists()
