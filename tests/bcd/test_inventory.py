"""Inventory: simulated GPUs stable per host, NVML read through its real code path, the OS section."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from better_compute.bcd.inventory import InventoryError, read_inventory, simulated_gpus


def test_simulated_gpus_are_stable_for_a_host_and_differ_between_hosts() -> None:
    first = simulated_gpus("8xH100", "node-a")
    assert [g.index for g in first] == list(range(8))
    assert {g.model for g in first} == {"H100"} and first[0].memory_mib == 81559
    assert first == simulated_gpus("8xH100", "node-a")
    assert {g.uuid for g in first}.isdisjoint(g.uuid for g in simulated_gpus("8xH100", "node-b"))
    assert all(g.uuid.startswith("GPU-") for g in first)


@pytest.mark.parametrize("spec", ["8", "xH100", "8 x H100", "-1xH100", "8xH100;rm"])
def test_a_malformed_simulated_spec_is_refused_with_the_expected_form(spec: str) -> None:
    with pytest.raises(InventoryError, match="<count>x<model>"):
        simulated_gpus(spec, "node-a")


def test_the_os_section_names_the_node_from_node_name(tmp_path: Path) -> None:
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nPRETTY_NAME="Ubuntu 24.04 LTS"\n')
    env = {
        "BCD_SIMULATED_GPUS": "2xH200",
        "NODE_NAME": "gke-a-1",
        "BCD_HOSTNAME": "host-1",
        "BCD_OS_RELEASE": str(release),
    }
    inventory = read_inventory(env)
    assert inventory.os.hostname == "host-1" and inventory.os.kubernetes_node_name == "gke-a-1"
    assert inventory.os.distribution == "Ubuntu 24.04 LTS"
    assert inventory.node_name == "gke-a-1"
    wire = inventory.model_dump(mode="json", by_alias=True)
    assert wire["os"]["kubernetesNodeName"] == "gke-a-1" and len(wire["gpus"]) == 2


def test_without_node_name_the_node_is_named_by_its_hostname() -> None:
    inventory = read_inventory({"BCD_SIMULATED_GPUS": "1xL4", "BCD_HOSTNAME": "vm-7"})
    assert inventory.os.kubernetes_node_name is None and inventory.node_name == "vm-7"


class FakeNvml(types.ModuleType):
    """pynvml's surface as bcd uses it, for two GPUs; records that NVML was shut down."""

    class NVMLError(Exception):
        pass

    def __init__(self, *, fail_init: bool = False) -> None:
        super().__init__("pynvml")
        self.fail_init = fail_init
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "560.35.03"

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:
        return f"GPU-real-{handle}".encode()

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        return types.SimpleNamespace(total=143771 * 1024 * 1024)


def test_nvml_is_read_when_no_simulation_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    inventory = read_inventory({"BCD_HOSTNAME": "gpu-host"})
    assert [(g.index, g.uuid, g.model, g.memory_mib) for g in inventory.gpus] == [
        (0, "GPU-real-0", "NVIDIA H200", 143771),
        (1, "GPU-real-1", "NVIDIA H200", 143771),
    ]
    assert inventory.os.driver_version == "560.35.03"
    assert fake.shutdown


def test_a_node_where_nvml_cannot_start_reports_no_gpus_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail_init=True))
    assert read_inventory({"BCD_HOSTNAME": "cpu-host"}).gpus == []
    assert "NVML did not start: Driver Not Loaded" in caplog.text
