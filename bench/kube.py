"""The Kubernetes API emulator: what a new cluster and an authorized request cost.

A new cluster now carries the bootstrap RBAC policy and a signing key; every request is
authenticated and evaluated by RBAC. Measured in one process on loopback TLS:
- `add_cluster`: mean over `--clusters` clusters;
- a namespaced LIST by an admin (system:masters) and by a ServiceAccount JWT bound through a
  RoleBinding: mean over `--requests` requests each.

    python bench/kube.py
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import time

import httpx

from better_compute.core.clock import SimClock
from better_compute.testing.kube import KubeApiServer
from better_compute.testing.kube.tokens import mint_account_token


async def _mean_request_ms(endpoint: str, ca: str, token: str, requests: int) -> float:
    context = ssl.create_default_context(cadata=ca)
    async with httpx.AsyncClient(verify=context, headers={"Authorization": f"Bearer {token}"}) as http:
        url = f"{endpoint}/api/v1/namespaces/default/configmaps"
        for _ in range(20):
            assert (await http.get(url)).status_code == 200
        start = time.perf_counter()
        for _ in range(requests):
            await http.get(url)
        return (time.perf_counter() - start) / requests * 1000


async def main(clusters: int, requests: int) -> None:
    async with KubeApiServer(SimClock()) as server:
        start = time.perf_counter()
        for i in range(clusters):
            server.add_cluster(f"c{i}")
        print(f"add_cluster: {(time.perf_counter() - start) / clusters * 1000:.1f} ms")
        cluster = server.cluster("c0")
        ca = base64.b64decode(cluster.ca_data).decode()
        admin = await _mean_request_ms(cluster.endpoint, ca, cluster.issue_token("admin", 3600), requests)
        print(f"LIST configmaps, admin token: {admin:.2f} ms")
        rbac = "rbac.authorization.k8s.io"
        binding = {
            "metadata": {"name": "default-view"},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "default"}],
        }
        cluster.ops.create(cluster.resource(f"{rbac}/v1", "RoleBinding"), "default", binding, manager="bench")
        token = str(mint_account_token(cluster, "default", "default", 3600)["status"]["token"])
        account = await _mean_request_ms(cluster.endpoint, ca, token, requests)
        print(f"LIST configmaps, ServiceAccount JWT via RoleBinding: {account:.2f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main(args.clusters, args.requests))
