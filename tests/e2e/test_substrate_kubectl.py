"""What the spec tells a user to look at when Nodes do not join works with the real kubectl: bcd's pods'
own log lines, from a substrate made through a FleetConfig document."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_world import World

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.substrates.manifests import NAMESPACE

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (CI has /usr/bin/kubectl)"),
]


async def _joined(world: World) -> bool:
    try:
        view = await world.compute.kubernetes_substrates.get(tenant_id=world.tenant_id, pool_id="gpu-fleet")
    except ComputeError:
        return False
    return view.state == "ready" and len(view.nodes_joined) == 2


async def _kubectl(config: Path, *args: str) -> tuple[int, str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(config.parent), "KUBECONFIG": str(config)}
    process = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, out.decode(), err.decode()


async def test_kubectl_logs_of_a_bcd_pod_shows_bcds_own_lines(world: World, tmp_path: Path) -> None:
    await world.compute.fleet.apply(world.document("doks"), tenant_id=world.tenant_id)
    await world.until(lambda: _joined(world), minutes=60, what="every Node joined")
    (cluster,) = world.cloud.kube.clusters.values()
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "c",
                        "cluster": {"server": cluster.endpoint, "certificate-authority-data": cluster.ca_data},
                    }
                ],
                "users": [{"name": "u", "user": {"token": cluster.issue_token("operator", ttl_seconds=3600)}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NAMESPACE}}],
                "current-context": "c",
            }
        )
    )
    pod = next(p["metadata"]["name"] for p in cluster.objects("Pod", NAMESPACE))
    code, out, err = await _kubectl(config, "logs", pod, "-c", "join")
    assert code == 0, err
    assert " INFO better_compute.bcd.join: joined as node node_" in out
    code, out, err = await _kubectl(config, "logs", pod)  # the pod's one container, bcd run
    assert code == 0, err
    assert " INFO better_compute.bcd.deviceplugin: registered nvidia.com/gpu at " in out
    assert " INFO better_compute.bcd.join:" not in out
    code, out, err = await _kubectl(config, "get", "events")
    assert code == 0, err
    assert "FailedCreate" not in out
