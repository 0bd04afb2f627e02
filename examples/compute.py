"""A Compute with the three providers and FleetConfig, for the CLI and `better-compute serve`.

    export BC_SECRET=...32+ characters...  BC_DATABASE_URL=sqlite:///better-compute.db
    better-compute --help
    better-compute fleet plan examples/fleet-gke.json --app examples.compute:compute

Each provider reads its own credentials the usual way (Google application default
credentials, the AWS credential chain); a DigitalOcean token is a secret reference
in the provider account (`better-compute secrets`, or `compute.secrets.create`).
Set BC_GKE_ENDPOINT, BC_EKS_ENDPOINT or BC_DOKS_ENDPOINT to point a driver at an
emulator instead of the cloud.
"""

from __future__ import annotations

import os

from better_compute.fleet import fleet_module
from better_compute.providers.aws import aws_provider
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.gcp import gcp_provider
from better_compute.server import DEFAULT_DATABASE, Compute, better_compute
from better_compute.vps import vps


def compute() -> Compute:
    """A fresh Compute, configured from the environment."""
    providers = [
        gcp_provider(endpoint=os.environ.get("BC_GKE_ENDPOINT")),
        aws_provider(endpoint=os.environ.get("BC_EKS_ENDPOINT")),
        digitalocean_provider(endpoint=os.environ.get("BC_DOKS_ENDPOINT")),
    ]
    return better_compute(
        database=os.environ.get("BC_DATABASE_URL", DEFAULT_DATABASE),
        secret=os.environ["BC_SECRET"],
        base_url=os.environ.get("BC_BASE_URL", "http://127.0.0.1:8080"),
        modules=[vps(providers=providers), fleet_module()],
    )
