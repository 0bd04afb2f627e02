"""bcd's objects for each provider's GPU node, the agent's overrides, and every object the product writes
to a cluster validated, strictly, against the official schemas of the oldest and newest Kubernetes the
providers offer."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from better_compute.core.errors import ComputeError
from better_compute.kubernetes.agent import SubstrateAgent, substrate_agent
from better_compute.kubernetes.cluster_access.cluster_claim import _claim
from better_compute.kubernetes.cluster_access.join_reviewer import reviewer_objects
from better_compute.kubernetes.cluster_access.substrate_identity import identity_objects
from better_compute.kubernetes.provider import GpuNode
from better_compute.kubernetes.substrates.gpu_driver import gpu_access
from better_compute.kubernetes.substrates.manifests import CRITICAL_QUOTA, bcd_objects, join_secret
from better_compute.providers.aws.vocabulary import VOCABULARY as EKS
from better_compute.providers.digitalocean.vocabulary import VOCABULARY as DOKS
from better_compute.providers.gcp.vocabulary import VOCABULARY as GKE
from better_compute.testing.doks.catalog import VERSIONS as DOKS_VERSIONS
from better_compute.testing.eks.catalog import KUBERNETES_VERSIONS as EKS_VERSIONS
from better_compute.testing.gke.catalog import VALID_MASTER_VERSIONS as GKE_VERSIONS

NODES = {"gke": GKE.gpu_node, "eks": EKS.gpu_node, "doks": DOKS.gpu_node}
PIN = "sha256/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
AGENT = substrate_agent(
    image="ghcr.io/better-compute/bcd:1",
    gateway_url="wss://gw.example",
    pins=[PIN],
    control_plane_url="https://cp.example",
    ca_pem="-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
)
OVERRIDDEN = substrate_agent(
    image="ghcr.io/better-compute/bcd:1",
    gateway_url="wss://gw.example",
    pins=[PIN],
    control_plane_url="https://cp.example",
    runtime_class_name="nvidia",
    tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
    priority_class_name="",
)


def _versions() -> tuple[str, str]:
    """The oldest and newest Kubernetes minor the providers offer (the emulators' catalogs of them)."""
    minors = {v.split("-")[0].rsplit(".", 1)[0] for v in (*GKE_VERSIONS, *EKS_VERSIONS.values(), *DOKS_VERSIONS)}
    ordered = sorted(minors, key=lambda m: tuple(int(p) for p in m.split(".")))
    return ordered[0], ordered[-1]


def _kinds(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


def _pod_spec(provider: str, agent: SubstrateAgent = AGENT) -> dict[str, Any]:
    spec: dict[str, Any] = _kinds(bcd_objects("pool_1", agent, NODES[provider]))["DaemonSet"]["spec"]
    return spec["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_on_gke_bc_system_gets_a_quota_for_the_critical_class_applied_before_the_daemonset() -> None:
    objects = bcd_objects("pool_1", AGENT, NODES["gke"])
    assert [o["kind"] for o in objects] == ["Namespace", "ResourceQuota", "ConfigMap", "DaemonSet"]
    quota = objects[1]
    assert quota["metadata"]["name"] == CRITICAL_QUOTA and quota["metadata"]["namespace"] == "bc-system"
    assert quota["spec"]["scopeSelector"]["matchExpressions"] == [
        {"scopeName": "PriorityClass", "operator": "In", "values": ["system-node-critical"]}
    ]
    assert _pod_spec("gke")["priorityClassName"] == "system-node-critical"
    for provider in ("eks", "doks"):
        assert [o["kind"] for o in bcd_objects("pool_1", AGENT, NODES[provider])] == [
            "Namespace",
            "ConfigMap",
            "DaemonSet",
        ]
    assert "ResourceQuota" not in _kinds(bcd_objects("pool_1", OVERRIDDEN, NODES["gke"]))


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
def test_bc_system_enforces_privileged_and_the_pods_ask_for_no_more_than_bcd_needs(provider: str) -> None:
    namespace = _kinds(bcd_objects("pool_1", AGENT, NODES[provider]))["Namespace"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    spec = _pod_spec(provider)
    assert not any(spec.get(h) for h in ("hostNetwork", "hostPID", "hostIPC"))
    assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    privileged = provider == "gke"
    unprivileged = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    for container in (*spec["initContainers"], *spec["containers"]):
        assert container["securityContext"] == ({"privileged": True} if privileged else unprivileged)
    hosts = sorted(v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v)
    expected = ["/var/lib/bcd", "/var/lib/kubelet/device-plugins"]
    assert hosts == sorted(
        [*expected, "/dev", "/home/kubernetes/bin/nvidia"] if privileged else [*expected, "/dev/null"]
    )


def test_on_gke_bcd_mounts_the_host_driver_and_dev_where_nvml_looks() -> None:
    spec = _pod_spec("gke")
    volumes = {v["name"]: v for v in spec["volumes"]}
    for container in (*spec["initContainers"], *spec["containers"]):
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        assert volumes[mounts["/usr/local/nvidia"]["name"]]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
        assert mounts["/usr/local/nvidia"]["readOnly"] is True
        assert volumes[mounts["/dev"]["name"]]["hostPath"]["path"] == "/dev"
        assert _env(container)["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
        assert "NVIDIA_VISIBLE_DEVICES" not in _env(container)  # COS has no NVIDIA runtime to read it


@pytest.mark.parametrize("provider", ["eks", "doks"])
def test_where_the_nvidia_runtime_is_the_default_bcd_asks_it_for_every_gpu_and_only_nvml(provider: str) -> None:
    spec = _pod_spec(provider)
    for container in (*spec["initContainers"], *spec["containers"]):
        env = _env(container)
        assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
        assert "LD_LIBRARY_PATH" not in env
        (every,) = [
            m for m in container["volumeMounts"] if m["mountPath"].startswith("/var/run/nvidia-container-devices/")
        ]
        assert every["mountPath"].endswith("/all")


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
def test_the_tolerations_cover_the_gpu_taints_of_every_provider_and_the_agents_own(provider: str) -> None:
    taints = [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},  # GKE
        {"key": "nvidia.com/gpu", "effect": "NoSchedule"},  # DOKS NVIDIA
        {"key": "amd.com/gpu", "effect": "NoSchedule"},  # DOKS AMD
    ]

    def tolerated(taint: dict[str, str], tolerations: list[dict[str, Any]]) -> bool:
        return any(
            t.get("key") == taint["key"]
            and (t.get("operator") == "Exists" or t.get("value") == taint.get("value"))
            and t.get("effect", taint["effect"]) == taint["effect"]
            for t in tolerations
        )

    assert all(tolerated(t, _pod_spec(provider)["tolerations"]) for t in taints)
    own = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    assert not tolerated(own, _pod_spec(provider)["tolerations"])
    overridden = _pod_spec(provider, OVERRIDDEN)
    assert tolerated(own, overridden["tolerations"])
    assert overridden["runtimeClassName"] == "nvidia" and "priorityClassName" not in overridden


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"runtime_class_name": "Nvidia_Runtime"}, "/runtimeClassName"),
        ({"priority_class_name": "UPPER"}, "/priorityClassName"),
        ({"tolerations": [{"key": "a", "operator": "Maybe"}]}, "/tolerations/0/operator"),
        ({"tolerations": [{"key": "a", "effect": "NoRun"}]}, "/tolerations/0/effect"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "/tolerations/0/value"),
        ({"tolerations": [{"key": "a", "colour": "red"}]}, "/tolerations/0"),
    ],
)
def test_a_bad_override_is_refused_naming_its_field(override: dict[str, Any], path: str) -> None:
    with pytest.raises(ComputeError) as refused:
        substrate_agent(
            image="bcd:1", gateway_url="wss://gw.example", control_plane_url="https://cp.example", **override
        )
    assert refused.value.path == path


def _everything_written() -> list[dict[str, Any]]:
    """Every object the product writes to a cluster: bcd's for each provider and agent, GKE's driver
    installer, the join Secret, the join reviewer's account and RBAC, the cluster's claim and the
    adopted cluster's identity."""
    written: list[dict[str, Any]] = []
    for node in NODES.values():
        for agent in (AGENT, OVERRIDDEN):
            written += gpu_access(bcd_objects("pool_1", agent, node), node)  # GKE's driver installer with it
    written.append(join_secret("pool_1", "jtk_a", "a-join-token"))
    written += reviewer_objects("pool_1")
    written.append(_claim("pool_1", "0123456789abcdef").to_dict())  # with its deployment mark
    written += identity_objects()
    return written


def test_every_kind_the_product_writes_is_gathered() -> None:
    kinds = {o["kind"] for o in _everything_written()}
    assert kinds == {
        "Namespace",
        "ResourceQuota",
        "ConfigMap",
        "DaemonSet",
        "Secret",
        "ServiceAccount",
        "ClusterRoleBinding",
        "ClusterRole",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }


GUARD = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
GUARD_SINCE = (1, 30)
"""admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is GA from Kubernetes 1.30; 1.29 has only v1beta1.
The substrate writes the adopted cluster's access guard at the version the cluster serves
(kubernetes/cluster_access/substrate_identity.py, `guard_api_version`): v1beta1 there."""


@pytest.mark.parametrize("version", _versions())
def test_every_object_the_product_writes_validates_strictly_against_the_official_schema(version: str) -> None:
    minor = tuple(int(p) for p in version.split("."))
    for obj in _everything_written():
        if obj["kind"] in GUARD and minor < GUARD_SINCE:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(obj, version, strict=True)  # v1 is not there: the guard is v1beta1
            continue
        kubernetes_validate.validate(obj, version, strict=True)
    if minor < GUARD_SINCE:
        beta = [o for o in identity_objects("admissionregistration.k8s.io/v1beta1") if o["kind"] in GUARD]
        assert len(beta) == 2
        for obj in beta:
            kubernetes_validate.validate(obj, version, strict=True)


def test_strict_validation_refuses_a_misspelt_field() -> None:
    daemon_set = _kinds(bcd_objects("pool_1", AGENT, GpuNode()))["DaemonSet"]
    daemon_set["spec"]["template"]["spec"]["tolerationz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemon_set, _versions()[0], strict=True)
