"""The Compute the CLI tests name with `--app fleet_cli_app:build`: stub provider hooks, the test's database."""

from __future__ import annotations

import os

from fleet_stub import stub_providers

from better_compute.fleet import fleet_module
from better_compute.server import Compute, better_compute
from better_compute.vps import vps


def build() -> Compute:
    return better_compute(
        database=os.environ["FLEET_TEST_DATABASE"],
        secret="c" * 40,
        modules=[vps(providers=list(stub_providers().values())), fleet_module()],
    )
