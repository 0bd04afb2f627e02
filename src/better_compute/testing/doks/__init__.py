"""An emulator of DigitalOcean Kubernetes (DOKS), API v2, that pydo talks to unchanged."""

from better_compute.testing.doks.emulator import DoksEmulator, Timings
from better_compute.testing.doks.faults import DoksFaults

__all__ = ["DoksEmulator", "DoksFaults", "Timings"]
