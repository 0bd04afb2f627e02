"""An emulated GKE (container.googleapis.com v1 REST) for tests, benchmarks and the demo."""

from better_compute.testing.gke.emulator import GkeEmulator, SeedPool
from better_compute.testing.gke.faults import GkeFaults

__all__ = ["GkeEmulator", "GkeFaults", "SeedPool"]
