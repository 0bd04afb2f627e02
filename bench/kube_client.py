"""What a cluster client costs the control plane: lightkube's own TLS context a client against `kube_client`'s,
kept per cluster CA. Every substrate and cluster run and every join check makes one client.

CPU (process time) a client, mean over `--clients`, in one process:
- made:          the client built and closed, no request;
- one request:   built, one LIST of Nodes from the Kubernetes API emulator over loopback TLS (a new connection
                 and handshake, the emulator's side included), closed.
The baseline is lightkube building the client from a kubeconfig with the CA's data, as `kube_client` did before.

    python bench/kube_client.py
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from datetime import timedelta

import lightkube
from lightkube.config.kubeconfig import KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer


def lightkube_own(credentials: ClusterCredentials) -> lightkube.AsyncClient:
    """The baseline: lightkube's context, built per client from a temporary file of the CA."""
    config = KubeConfig.from_one(
        cluster=Cluster(server=credentials.endpoint, certificate_auth_data=credentials.ca_data),
        user=User(token=credentials.token),
    )
    return lightkube.AsyncClient(config, trust_env=False)


async def cpu_ms(
    make: Callable[[ClusterCredentials], lightkube.AsyncClient],
    credentials: ClusterCredentials,
    clients: int,
    request: bool,
) -> float:
    start = time.process_time()
    for _ in range(clients):
        client = make(credentials)
        if request:
            assert [node async for node in client.list(Node)] == []
        await client.close()
    return (time.process_time() - start) / clients * 1000


async def main(clients: int) -> None:
    clock = SimClock()
    async with KubeApiServer(clock) as server:
        cluster = server.add_cluster("c1")
        token = cluster.issue_token("admin", ttl_seconds=3600)
        credentials = ClusterCredentials(cluster.endpoint, cluster.ca_data, token, clock.now() + timedelta(hours=1))
        for request in (False, True):
            base = await cpu_ms(lightkube_own, credentials, clients, request)
            head = await cpu_ms(kube_client, credentials, clients, request)
            what = "one request" if request else "made"
            print(f"{what}: lightkube's own context {base:.3f} ms, kept per CA {head:.3f} ms, ratio {head / base:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=300)
    asyncio.run(main(parser.parse_args().clients))
