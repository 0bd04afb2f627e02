"""The kubelet simulator: DaemonSet scheduling, pod status, the runtime hook and the faults."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

import lightkube
import pytest
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod, Secret
from lightkube.types import CascadeType, PatchType

from better_compute.bcd.simnvml import NVMLError, SimulatedNvml
from better_compute.core.clock import SimClock
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials
from better_compute.testing.kube import KubeApiServer, KubeCluster, NodeRun, PodRun
from better_compute.testing.kube.gpus import AL2023_NVIDIA, NodeGpus
from better_compute.testing.kube.tables import render_table


def daemonset(pod_spec_extra: dict[str, Any] | None = None, name: str = "bcd") -> DaemonSet:
    spec: dict[str, Any] = {"containers": [{"name": "bcd", "image": "bcd:1"}], **(pod_spec_extra or {})}
    return DaemonSet.from_dict(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }
    )


def placement(cluster: KubeCluster) -> dict[str, str]:
    """node name -> pod phase, for the pods the DaemonSet made."""
    return {p["spec"]["nodeName"]: p["status"]["phase"] for p in cluster.objects("Pod", "default")}


async def test_daemonset_pods_follow_the_node_selector_and_label_changes(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await cluster.kubelet.add_node("gpu-1", labels={"pool": "gpu"})
    await cluster.kubelet.add_node("cpu-1", labels={"pool": "cpu"})
    await client.apply(daemonset({"nodeSelector": {"pool": "gpu"}}), field_manager="t")
    assert placement(cluster) == {"gpu-1": "Running"}
    await client.patch(Node, "cpu-1", {"metadata": {"labels": {"pool": "gpu"}}}, patch_type=PatchType.MERGE)
    assert placement(cluster) == {"gpu-1": "Running", "cpu-1": "Running"}
    await client.patch(Node, "gpu-1", {"metadata": {"labels": {"pool": None}}}, patch_type=PatchType.MERGE)
    assert placement(cluster) == {"cpu-1": "Running"}
    ds = await client.get(DaemonSet, "bcd", namespace="default")
    assert (ds.status.desiredNumberScheduled, ds.status.currentNumberScheduled, ds.status.numberReady) == (1, 1, 1)


async def test_daemonset_pods_follow_required_node_affinity(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "gpu", "operator": "In", "values": ["h100", "a100"]},
                            {"key": "spot", "operator": "DoesNotExist"},
                        ]
                    },
                    {"matchExpressions": [{"key": "force", "operator": "Exists"}]},
                ]
            }
        }
    }
    await cluster.kubelet.add_node("h100", labels={"gpu": "h100"})
    await cluster.kubelet.add_node("a100-spot", labels={"gpu": "a100", "spot": "true"})
    await cluster.kubelet.add_node("l4", labels={"gpu": "l4"})
    await cluster.kubelet.add_node("forced", labels={"force": ""})
    await client.apply(daemonset({"affinity": affinity}), field_manager="t")
    assert sorted(placement(cluster)) == ["forced", "h100"]


async def test_daemonset_pods_need_to_tolerate_taints_but_run_on_cordoned_nodes(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    await cluster.kubelet.add_node("tainted", taints=[taint])
    await cluster.kubelet.add_node("cordoned")
    await client.patch(Node, "cordoned", {"spec": {"unschedulable": True}}, patch_type=PatchType.STRATEGIC)
    await client.apply(daemonset(name="plain"), field_manager="t")
    tolerating = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    await client.apply(daemonset(tolerating, name="tolerant"), field_manager="t")
    by_ds = sorted((p["metadata"]["labels"]["app"], p["spec"]["nodeName"]) for p in cluster.objects("Pod", "default"))
    assert by_ds == [("plain", "cordoned"), ("tolerant", "cordoned"), ("tolerant", "tainted")]


async def test_a_pod_on_a_node_that_goes_away_is_gone(client: lightkube.AsyncClient, cluster: KubeCluster) -> None:
    await cluster.kubelet.add_node("n1")
    await cluster.kubelet.add_node("n2")
    await client.apply(daemonset(), field_manager="t")
    pods = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in cluster.objects("Pod", "default")}
    await cluster.kubelet.remove_node("n1")
    with pytest.raises(lightkube.ApiError) as caught:
        await client.get(Pod, pods["n1"], namespace="default")
    assert caught.value.status.code == 404
    assert placement(cluster) == {"n2": "Running"}
    await cluster.kubelet.add_node("n3")
    assert sorted(placement(cluster)) == ["n2", "n3"]


async def test_pods_carry_node_name_owner_and_running_status(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await cluster.kubelet.add_node("n1")
    ds = await client.apply(daemonset(), field_manager="t")
    [pod] = [p async for p in client.list(Pod, namespace="default", labels={"app": "bcd"})]
    assert pod.metadata.name.startswith("bcd-")
    assert pod.spec.nodeName == "n1"
    [owner] = pod.metadata.ownerReferences
    assert (owner.kind, owner.name, owner.uid, owner.controller) == ("DaemonSet", "bcd", ds.metadata.uid, True)
    assert pod.status.phase == "Running"
    assert pod.status.podIP
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    assert pod.status.containerStatuses[0].state.running is not None


async def test_template_change_replaces_pods_and_deleting_the_daemonset_removes_them(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await cluster.kubelet.add_node("n1")
    await client.apply(daemonset(), field_manager="t")
    [before] = cluster.objects("Pod", "default")
    updated = daemonset()
    updated.spec.template.spec.containers[0].image = "bcd:2"
    await client.apply(updated, field_manager="t")
    [after] = cluster.objects("Pod", "default")
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    assert after["spec"]["containers"][0]["image"] == "bcd:2"
    await client.delete(DaemonSet, "bcd", namespace="default")
    assert cluster.objects("Pod", "default") == []


async def test_image_pull_failure_keeps_the_pod_pending_with_err_image_pull(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    cluster.kubelet.image_pull_failures.add("registry.example/bcd:*")
    await cluster.kubelet.add_node("n1")
    await client.apply(
        daemonset({"containers": [{"name": "bcd", "image": "registry.example/bcd:9"}]}), field_manager="t"
    )
    [pod] = [p async for p in client.list(Pod, namespace="default")]
    assert pod.status.phase == "Pending"
    waiting = pod.status.containerStatuses[0].state.waiting
    assert waiting.reason == "ErrImagePull"
    events = [e async for e in client.list(Event, namespace="default")]
    assert sorted((e.reason, e.message) for e in events if e.involvedObject.name == pod.metadata.name) == [
        ("Failed", "Error: ErrImagePull"),
        (
            "Failed",
            'Failed to pull image "registry.example/bcd:9": failed to resolve reference '
            '"registry.example/bcd:9": not found',
        ),
    ]
    cluster.kubelet.image_pull_failures.clear()
    clock.advance(10)  # the kubelet's first back-off: it pulls again, unasked
    for _ in range(3):
        await asyncio.sleep(0)
    assert (await client.get(Pod, pod.metadata.name, namespace="default")).status.phase == "Running"


async def test_pods_on_a_not_ready_node_wait_and_lose_readiness(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await cluster.kubelet.add_node("up")
    await cluster.kubelet.add_node("down", ready=False)
    await client.apply(daemonset(), field_manager="t")
    assert placement(cluster) == {"up": "Running", "down": "Pending"}
    await cluster.kubelet.set_ready("up", False)
    [pod] = [p for p in cluster.objects("Pod", "default") if p["spec"]["nodeName"] == "up"]
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    await cluster.kubelet.set_ready("down", True)
    assert placement(cluster) == {"up": "Running", "down": "Running"}
    ds = await client.get(DaemonSet, "bcd", namespace="default")
    assert (ds.status.desiredNumberScheduled, ds.status.numberReady) == (2, 1)


async def test_the_pod_runtime_hook_runs_containers_with_env_and_mounted_files(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    runs: list[tuple[PodRun, NodeRun]] = []
    release = asyncio.Event()

    async def runtime(pod: PodRun, node: NodeRun) -> None:
        runs.append((pod, node))
        if not pod.container.init:
            await release.wait()

    cluster.kubelet.pod_runtime = runtime
    await client.create(Secret(metadata=ObjectMeta(name="join", namespace="default"), stringData={"token": "bcj_x"}))
    await client.create(ConfigMap(metadata=ObjectMeta(name="conf", namespace="default"), data={"url": "https://bc"}))
    await cluster.kubelet.add_node("gpu-1", labels={"pool": "gpu"}, capacity={"nvidia.com/gpu": "8"})
    pod_spec = {
        "initContainers": [{"name": "join", "image": "bcd:1", "args": ["join"]}],
        "containers": [
            {
                "name": "bcd",
                "image": "bcd:1",
                "env": [
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "join", "key": "token"}}},
                    {"name": "PLAIN", "value": "yes"},
                ],
                "envFrom": [{"configMapRef": {"name": "conf"}, "prefix": "BC_"}],
                "volumeMounts": [
                    {"name": "secret", "mountPath": "/etc/bc/secret"},
                    {"name": "conf", "mountPath": "/etc/bc/conf"},
                ],
            }
        ],
        "volumes": [
            {"name": "secret", "secret": {"secretName": "join"}},
            {"name": "conf", "configMap": {"name": "conf"}},
        ],
    }
    init_release = asyncio.Event()

    async def gated(pod: PodRun, node: NodeRun) -> None:
        if pod.container.init:
            await init_release.wait()
        await runtime(pod, node)

    cluster.kubelet.pod_runtime = gated
    await client.apply(daemonset(pod_spec), field_manager="t")
    await asyncio.sleep(0.05)
    [initializing] = cluster.objects("Pod", "default")
    assert initializing["status"]["phase"] == "Pending"
    assert "running" in initializing["status"]["initContainerStatuses"][0]["state"]
    assert initializing["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
    init_release.set()
    while len(runs) < 2:
        await asyncio.sleep(0.01)
    init, main = runs
    assert (init[0].container.name, init[0].container.init, init[0].container.args) == ("join", True, ("join",))
    run, node = main
    assert run.container.name == "bcd"
    assert run.node_name == node.name == "gpu-1"
    assert node.capacity["nvidia.com/gpu"] == "8"
    assert node.labels["pool"] == "gpu"
    assert (node.device_plugin_dir / "kubelet.sock").exists()
    env = run.container.env
    assert (env["NODE_NAME"], env["TOKEN"], env["PLAIN"], env["BC_url"]) == ("gpu-1", "bcj_x", "yes", "https://bc")
    files = run.container.files
    assert files["/etc/bc/secret/token"] == b"bcj_x"
    assert files["/etc/bc/conf/url"] == b"https://bc"
    assert files["/var/run/secrets/kubernetes.io/serviceaccount/namespace"] == b"default"
    assert base64.b64decode(cluster.ca_data) == files["/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"]
    assert placement(cluster) == {"gpu-1": "Running"}
    release.set()
    for _ in range(100):
        await asyncio.sleep(0.01)
        [pod] = cluster.objects("Pod", "default")
        if "terminated" in pod["status"]["containerStatuses"][0]["state"]:
            break
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"


async def test_a_failing_container_is_reported_and_a_missing_secret_blocks_the_start(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    async def runtime(pod: PodRun, node: NodeRun) -> None:
        raise RuntimeError("bcd exited: no GPUs")

    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("n1")
    await client.apply(daemonset(), field_manager="t")
    for _ in range(100):
        await asyncio.sleep(0.01)
        [pod] = cluster.objects("Pod", "default")
        statuses = pod["status"].get("containerStatuses") or []  # none until the kubelet's first write
        if statuses and "waiting" in statuses[0]["state"]:
            break
    status = pod["status"]["containerStatuses"][0]
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["message"] == "bcd exited: no GPUs"
    secret_env = {
        "containers": [
            {
                "name": "c",
                "image": "i:1",
                "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "absent", "key": "k"}}}],
            }
        ]
    }
    await client.apply(daemonset(secret_env, name="needs-secret"), field_manager="t")
    [blocked] = cluster.objects("Pod", "default", labels={"app": "needs-secret"})
    assert blocked["status"]["phase"] == "Pending"
    assert blocked["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "CreateContainerConfigError"


async def test_removing_a_node_cancels_its_running_containers(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    cancelled = asyncio.Event()

    async def runtime(pod: PodRun, node: NodeRun) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("spot-1")
    await client.apply(daemonset(), field_manager="t")
    await asyncio.sleep(0.05)
    await cluster.kubelet.remove_node("spot-1")
    await asyncio.wait_for(cancelled.wait(), timeout=5)
    assert cluster.objects("Pod", "default") == []


@pytest.mark.timeout(60)  # the failure this catches is a pod that never ends: fail, don't hang
@pytest.mark.parametrize("init", [True, False], ids=["init-container", "container"])
async def test_a_container_that_fails_while_it_is_stopped_is_not_restarted(
    client: lightkube.AsyncClient, cluster: KubeCluster, init: bool
) -> None:
    """A process may turn its stop into an error of its own; the kubelet must not restart it then
    (a back-off on a clock that no longer moves kept the pod, and its cluster's close, for ever)."""
    runs = 0

    async def runtime(pod: PodRun, node: NodeRun) -> None:
        nonlocal runs
        if pod.container.init != init:
            return  # the other kind of container is not the one under test
        runs += 1
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("shutdown failed") from None

    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("spot-1")
    extra = {"initContainers": [{"name": "join", "image": "bcd:1", "args": ["join"]}]} if init else None
    await client.apply(daemonset(extra), field_manager="t")
    await _until(lambda: runs == 1)
    closing = asyncio.ensure_future(cluster.close())  # cancels the pod, and waits for it
    done, _ = await asyncio.wait({closing}, timeout=5)
    assert done, "the container was restarted after its stop, so its pod never ended"
    assert runs == 1


async def test_foreground_deletion_keeps_the_daemonset_until_its_pods_are_gone(
    client: lightkube.AsyncClient, cluster: KubeCluster
) -> None:
    await cluster.kubelet.add_node("n1")
    await client.apply(daemonset(), field_manager="t")
    [pod] = cluster.objects("Pod", "default")
    await client.patch(
        Pod,
        pod["metadata"]["name"],
        {"metadata": {"finalizers": ["test/hold"]}},
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    await client.delete(DaemonSet, "bcd", namespace="default", cascade=CascadeType.FOREGROUND)
    deleting = await client.get(DaemonSet, "bcd", namespace="default")
    assert deleting.metadata.deletionTimestamp is not None
    assert deleting.metadata.finalizers == ["foregroundDeletion"]
    [held] = cluster.objects("Pod", "default")
    assert held["metadata"]["uid"] == pod["metadata"]["uid"]
    assert "deletionTimestamp" in held["metadata"]
    await client.patch(
        Pod,
        pod["metadata"]["name"],
        {"metadata": {"finalizers": None}},
        namespace="default",
        patch_type=PatchType.MERGE,
    )
    assert cluster.objects("Pod", "default") == []
    assert cluster.get_object("DaemonSet", "bcd", "default") is None


async def test_a_pod_blocked_on_a_missing_secret_is_not_rewritten_until_the_secret_comes(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    """The kubelet writes a blocked pod's wait once: later settles (new Nodes, unrelated Secrets,
    time passing) leave its status and resourceVersion alone; the Secret it waits for starts it."""
    writes: list[str] = []
    cluster.subscribe(lambda c: writes.append(c.object["metadata"]["name"]) if c.resource.kind == "Pod" else None)
    volume = {"name": "join", "secret": {"secretName": "bcd-join"}}
    mounts = {"containers": [{"name": "bcd", "image": "bcd:1", "volumeMounts": [{"name": "join", "mountPath": "/j"}]}]}
    await cluster.kubelet.add_node("n0")
    await client.apply(daemonset({**mounts, "volumes": [volume]}), field_manager="t")
    [first] = cluster.objects("Pod", "default")
    assert first["status"]["containerStatuses"][0]["state"]["waiting"] == {
        "reason": "ContainerCreating",
        "message": 'secret "bcd-join" not found',
    }
    name = first["metadata"]["name"]
    assert writes.count(name) == 2  # created, then its waiting status
    for index in range(1, 6):
        clock.advance(30)
        await cluster.kubelet.add_node(f"n{index}")
        await client.create(Secret(metadata=ObjectMeta(name=f"other-{index}", namespace="default")))
    cluster.settle()
    assert writes.count(name) == 2
    assert cluster.get_object("Pod", name, "default") == first
    pods = cluster.objects("Pod", "default")
    assert len(pods) == 6 and all(p["status"]["phase"] == "Pending" for p in pods)
    assert len(writes) == 12  # each pod: created, then one waiting status
    clock.advance(30)
    await client.create(Secret(metadata=ObjectMeta(name="bcd-join", namespace="default"), stringData={"t": "x"}))
    assert placement(cluster) == {f"n{index}": "Running" for index in range(6)}


async def _until(predicate: Any) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the kubelet never got there")


async def test_a_failed_init_container_is_restarted_after_a_doubling_back_off(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    """Like a kubelet under restartPolicy Always: Init:CrashLoopBackOff, then the init container
    runs again 10 s later, then 20 s after its next failure; once it succeeds the pod runs."""
    attempts: list[float] = []
    started = clock.now()

    async def runtime(pod: PodRun, node: NodeRun) -> None:
        if pod.container.init:
            attempts.append((clock.now() - started).total_seconds())
            if len(attempts) < 3:
                raise RuntimeError("join token is used up")
            return
        await asyncio.Event().wait()

    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("n1")
    init = {"initContainers": [{"name": "join", "image": "bcd:1", "args": ["join"]}]}
    await client.apply(daemonset(init), field_manager="t")
    await _until(lambda: len(attempts) == 1 and _init_state(cluster).get("waiting"))
    [pod] = cluster.objects("Pod", "default")
    entry = pod["status"]["initContainerStatuses"][0]
    assert (pod["status"]["phase"], entry["restartCount"]) == ("Pending", 1)
    assert entry["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert entry["lastState"]["terminated"]["message"] == "join token is used up"
    table = render_table(cluster.resource("v1", "Pod"), [pod], clock.now(), "1")
    assert table["rows"][0]["cells"][1:4] == ["0/1", "Init:CrashLoopBackOff", 1]  # kubectl get pods
    clock.advance(9.9)
    await asyncio.sleep(0.02)
    assert len(attempts) == 1
    clock.advance(0.1)
    await _until(lambda: len(attempts) == 2 and _init_state(cluster).get("waiting"))
    clock.advance(19.9)
    await asyncio.sleep(0.02)
    assert len(attempts) == 2
    clock.advance(0.1)
    await _until(lambda: placement(cluster) == {"n1": "Running"})
    assert attempts == [0.0, 10.0, 30.0]
    [pod] = cluster.objects("Pod", "default")
    assert [c["type"] for c in pod["status"]["conditions"] if c["status"] == "True"] == [
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]


def _init_state(cluster: KubeCluster) -> dict[str, Any]:
    pods = cluster.objects("Pod", "default")
    inits = pods[0].get("status", {}).get("initContainerStatuses") if pods else None
    return inits[0]["state"] if inits else {}


def _main_state(cluster: KubeCluster) -> dict[str, Any]:
    pods = cluster.objects("Pod", "default")
    mains = pods[0].get("status", {}).get("containerStatuses") if pods else None
    return mains[0]["state"] if mains else {}


class _FailingFirst:
    """A pod runtime whose first `failures` runs raise; later ones run until their pod goes."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs = 0

    async def __call__(self, pod: PodRun, node: NodeRun) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise RuntimeError("bcd exited: gateway unreachable")
        await asyncio.Event().wait()


async def test_a_failed_container_runs_again_and_the_pod_is_ready_again(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    runtime = _FailingFirst(1)
    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("n1")
    await client.apply(daemonset(), field_manager="t")
    await _until(lambda: "waiting" in _main_state(cluster))
    [pod] = cluster.objects("Pod", "default")
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "False"
    clock.advance(10)
    await _until(lambda: runtime.runs == 2)
    await _until(lambda: "running" in _main_state(cluster))
    [pod] = cluster.objects("Pod", "default")
    entry = pod["status"]["containerStatuses"][0]
    assert (entry["restartCount"], entry["ready"]) == (1, True)
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"


async def test_under_restart_policy_never_a_failed_init_container_fails_the_pod_for_good(
    client: lightkube.AsyncClient, cluster: KubeCluster, clock: SimClock
) -> None:
    runtime = _FailingFirst(1_000)
    cluster.kubelet.pod_runtime = runtime
    await cluster.kubelet.add_node("n1")
    spec = {"restartPolicy": "Never", "initContainers": [{"name": "join", "image": "bcd:1"}]}
    await client.create(
        Pod.from_dict(
            {
                "metadata": {"name": "once", "namespace": "default"},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i:1"}], **spec},
            }
        )
    )
    await _until(lambda: cluster.objects("Pod", "default")[0]["status"].get("phase") == "Failed")
    clock.advance(600)
    await asyncio.sleep(0.02)
    assert runtime.runs == 1


async def test_each_machine_has_its_own_nvml_even_under_a_name_another_machine_had(
    client: lightkube.AsyncClient,
    kube: KubeApiServer,
    cluster: KubeCluster,
    credentials_for: Callable[..., ClusterCredentials],
) -> None:
    """A fault injected into one machine's GPU reaches the bcd on that machine only: not one on a machine of
    another cluster under the same name (EKS hostnames come from addresses every VPC reuses), and not one
    on the machine made later under the name (an address handed out again, a GKE instance recreated)."""
    name = "ip-10-0-16-5.ec2.internal"
    other = kube.add_cluster("c2")
    given: dict[str, list[SimulatedNvml | None]] = {"c1": [], "c2": []}
    for each, key in ((cluster, "c1"), (other, "c2")):

        async def runtime(pod: PodRun, node: NodeRun, into: list[SimulatedNvml | None] = given[key]) -> None:
            into.append(node.nvml)  # what bcd on this machine watches health through
            await asyncio.Event().wait()

        each.kubelet.pod_runtime = runtime
        await each.kubelet.add_node(name, gpus=NodeGpus(4, "H100", AL2023_NVIDIA))
    await client.apply(daemonset(), field_manager="t")
    second = kube_client(credentials_for(other), timeout=10)
    try:
        await second.apply(daemonset(), field_manager="t")
    finally:
        await second.close()
    await _ran(lambda: len(given["c1"]) == len(given["c2"]) == 1)
    [first], [elsewhere] = given["c1"], given["c2"]
    assert first is not None and elsewhere is not None

    cluster.kubelet.gpu_fault(name, 0, lost=True)
    with pytest.raises(NVMLError):
        first.nvmlDeviceGetHandleByIndex(0)
    assert elsewhere.nvmlDeviceGetHandleByIndex(0).uuid == first.gpus[0].uuid  # the same GPU ids, healthy

    await cluster.kubelet.remove_node(name)
    await cluster.kubelet.add_node(name, gpus=NodeGpus(4, "H100", AL2023_NVIDIA))
    await _ran(lambda: len(given["c1"]) == 2)
    remade = given["c1"][-1]
    assert remade is not None and remade.nvmlDeviceGetHandleByIndex(0).uuid == first.gpus[0].uuid


async def _ran(done: Callable[[], bool]) -> None:
    """Let the kubelets' pod tasks run until `done` (they start on the loop's next turns)."""
    for _ in range(200):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError("the pods never ran")
