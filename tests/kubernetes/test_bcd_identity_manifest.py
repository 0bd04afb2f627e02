"""bcd's DaemonSet asks the kubelet for the join's proof of identity, and for no other token."""

from __future__ import annotations

from typing import Any

from better_compute.kubernetes.agent import substrate_agent
from better_compute.kubernetes.names import JOIN_AUDIENCE
from better_compute.kubernetes.provider import GpuNode
from better_compute.kubernetes.substrates.manifests import SERVICE_ACCOUNT, bcd_objects

AGENT = substrate_agent(
    image="ghcr.io/better-compute/bcd:1",
    gateway_url="wss://gw.example",
    pins=["sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],
    control_plane_url="https://cp.example",
)


def pod_spec() -> dict[str, Any]:
    (daemon_set,) = [o for o in bcd_objects("pool_1", AGENT, GpuNode()) if o["kind"] == "DaemonSet"]
    spec: dict[str, Any] = daemon_set["spec"]["template"]["spec"]
    return spec


def test_the_join_container_mounts_a_projected_token_for_the_join_audience_where_bcd_reads_it() -> None:
    spec = pod_spec()
    volumes = {v["name"]: v for v in spec["volumes"]}
    (join,) = spec["initContainers"]
    env = {e["name"]: e.get("value") for e in join["env"]}
    (mount,) = [m for m in join["volumeMounts"] if m["name"] == "identity"]
    (source,) = volumes["identity"]["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert token["audience"] == JOIN_AUDIENCE and token["expirationSeconds"] >= 600
    assert env["BCD_IDENTITY_TOKEN_FILE"] == f"{mount['mountPath']}/{token['path']}"
    assert mount["readOnly"] is True


def test_no_api_token_is_mounted_and_the_account_is_the_one_the_substrate_checks() -> None:
    spec = pod_spec()
    assert spec["automountServiceAccountToken"] is False
    assert spec["serviceAccountName"] == SERVICE_ACCOUNT
    (run,) = spec["containers"]
    assert all(m["name"] != "identity" for m in run["volumeMounts"])
