"""A Compute with the three providers and FleetConfig, for the CLI and `better-compute serve`.

    export BC_SECRET=...32+ characters...  BC_DATABASE_URL=sqlite:///better-compute.db
    better-compute --help
    better-compute fleet plan examples/fleet-gke.json --app examples.compute:compute
    better-compute serve --app examples.compute:compute      # the HTTP API, gateway and engine

It wires the providers as the spec's "Turn it on" does: one provider list given to vps()
and kubernetes(), the substrate agent, then fleet_module(). docs/credentials.md says how
each provider gets its credentials and how to run bcd's image.

Each provider reads its own credentials the usual way (Google application default
credentials, the AWS credential chain); a DigitalOcean token is a secret reference
in the provider account (`better-compute secrets`, or `compute.secrets.create`).
Set BC_GKE_ENDPOINT, BC_EKS_ENDPOINT or BC_DOKS_ENDPOINT to point a driver at an
emulator instead of the cloud.

The substrate agent says what runs bcd on each cluster: its image, the gateway
URL and SPKI pins bcd checks, and the control plane URL it joins at
(BC_BCD_IMAGE, BC_GATEWAY_URL, BC_GATEWAY_PINS, BC_CONTROL_PLANE_URL). Without
BC_BCD_IMAGE the self-check reports `kubernetes.substrate-agent-missing`.
"""

from __future__ import annotations

import os

from better_compute.fleet import fleet_module
from better_compute.kubernetes import kubernetes
from better_compute.providers.aws import aws_provider
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.gcp import gcp_provider
from better_compute.providers.kubernetes import kubernetes_substrate_agent
from better_compute.server import DEFAULT_DATABASE, Compute, better_compute
from better_compute.vps import vps


def compute() -> Compute:
    """A fresh Compute, configured from the environment."""
    providers = [
        gcp_provider(endpoint=os.environ.get("BC_GKE_ENDPOINT")),
        aws_provider(endpoint=os.environ.get("BC_EKS_ENDPOINT")),
        digitalocean_provider(endpoint=os.environ.get("BC_DOKS_ENDPOINT")),
    ]
    agent = None
    if os.environ.get("BC_BCD_IMAGE"):
        agent = kubernetes_substrate_agent(
            image=os.environ["BC_BCD_IMAGE"],
            gateway_url=os.environ["BC_GATEWAY_URL"],
            pins=[p for p in os.environ.get("BC_GATEWAY_PINS", "").split(",") if p],
            control_plane_url=os.environ.get("BC_CONTROL_PLANE_URL", os.environ.get("BC_BASE_URL", "")),
        )
    return better_compute(
        database=os.environ.get("BC_DATABASE_URL", DEFAULT_DATABASE),
        secret=os.environ["BC_SECRET"],
        base_url=os.environ.get("BC_BASE_URL", "http://127.0.0.1:8080"),
        modules=[
            vps(providers=providers),
            kubernetes(providers=providers, substrate={"agent": agent}),
            fleet_module(),
        ],
    )
