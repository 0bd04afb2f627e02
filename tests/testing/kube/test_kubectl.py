"""The real kubectl against the emulator, for every client the dispatcher carries.

/usr/bin/kubectl is a dispatcher that runs the 1.27-1.33 client matching the
server's reported version, so each case sets the cluster's version and thereby
exercises that client. Skips with the reason when kubectl is not installed.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from better_compute.core.clock import SimClock
from better_compute.testing.gke.system import install_gke_system
from better_compute.testing.kube import KubeApiServer, KubeCluster, NodeRun, PodRun

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
pytestmark = [
    pytest.mark.kubectl,
    pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl is not installed (CI has /usr/bin/kubectl)"),
]

DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: bcd, namespace: default}
spec:
  selector: {matchLabels: {app: bcd}}
  template:
    metadata: {labels: {app: bcd}}
    spec:
      nodeSelector: {pool: gpu}
      containers: [{name: bcd, image: "bcd:1"}]
"""


@dataclass
class Result:
    code: int
    out: str
    err: str


def write_kubeconfig(path: Path, cluster: KubeCluster, token: str) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "emu", "cluster": {"server": cluster.endpoint, "certificate-authority-data": cluster.ca_data}}
        ],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "admin", "namespace": "default"}}],
        "current-context": "emu",
    }
    path.write_text(yaml.safe_dump(config))


async def kubectl(kubeconfig: Path, *args: str) -> Result:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(kubeconfig.parent), "KUBECONFIG": str(kubeconfig)}
    process = await asyncio.create_subprocess_exec(
        KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return Result(process.returncode, out.decode(), err.decode())


VERSIONS = ["1.27.16", "1.28.15", "1.29.12", "1.30.8", "1.31.2", "1.32.4", "1.33.1"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_drives_the_emulator(kube: KubeApiServer, clock: SimClock, tmp_path: Path, version: str) -> None:
    cluster = kube.add_cluster("k", version=version)
    await cluster.kubelet.add_node("gpu-1", labels={"pool": "gpu"})
    await cluster.kubelet.add_node("cpu-1", labels={"pool": "cpu"})
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster, cluster.issue_token("admin", ttl_seconds=600))

    served = await kubectl(config, "version", "-o", "json")
    assert served.code == 0, served.err
    assert yaml.safe_load(served.out)["serverVersion"]["gitVersion"] == f"v{version}"
    client_minor = yaml.safe_load(served.out)["clientVersion"]["minor"]
    assert client_minor.rstrip("+") == version.split(".")[1]

    nodes = await kubectl(config, "get", "nodes", "-l", "pool=gpu")
    assert nodes.code == 0, nodes.err
    assert nodes.out.split("\n")[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [line.split()[0] for line in nodes.out.strip().split("\n")[1:]] == ["gpu-1"]

    manifest = tmp_path / "ds.yaml"
    manifest.write_text(DAEMONSET)
    applied = await kubectl(config, "apply", "--server-side", "-f", str(manifest))
    assert applied.code == 0, applied.err
    assert "daemonset.apps/bcd serverside-applied" in applied.out
    [pod] = cluster.objects("Pod", "default")
    assert pod["spec"]["nodeName"] == "gpu-1"
    managers = [m["manager"] for m in cluster.get_object("DaemonSet", "bcd", "default")["metadata"]["managedFields"]]  # type: ignore[index]
    assert "kubectl" in managers
    manifest.write_text(DAEMONSET.replace("bcd:1", "bcd:2"))
    conflict = await kubectl(config, "apply", "--server-side", "--field-manager=other", "-f", str(manifest))
    assert conflict.code != 0
    assert (
        'Apply failed with 1 conflict: conflict with "kubectl": .spec.template.spec.containers[name="bcd"].image'
        in conflict.err
    )
    forced = await kubectl(
        config, "apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", str(manifest)
    )
    assert forced.code == 0, forced.err
    [replaced] = cluster.objects("Pod", "default")
    assert replaced["spec"]["containers"][0]["image"] == "bcd:2"

    created = await kubectl(config, "create", "configmap", "settings", "--from-literal=a=b")
    assert created.code == 0, created.err
    assert "configmap/settings created" in created.out
    refused = await kubectl(config, "create", "configmap", "settings", "--from-literal=a=c")
    assert refused.code != 0
    assert 'configmaps "settings" already exists' in refused.err
    assert cluster.get_object("ConfigMap", "settings", "default")["data"] == {"a": "b"}  # type: ignore[index]

    labelled = await kubectl(config, "label", "configmap", "settings", "app=bc")
    assert labelled.code == 0, labelled.err
    kept = await kubectl(config, "create", "configmap", "unlabelled", "--from-literal=x=y")
    assert kept.code == 0, kept.err
    deleted = await kubectl(config, "delete", "configmap", "-l", "app=bc")
    assert deleted.code == 0, deleted.err
    assert 'configmap "settings" deleted' in deleted.out
    assert [cm["metadata"]["name"] for cm in cluster.objects("ConfigMap", "default")] == ["unlabelled"]

    clock.advance(600)
    expired = await kubectl(config, "get", "nodes")
    assert expired.code != 0
    assert "Unauthorized" in expired.err or "must be logged in" in expired.err


BUDGETED = """
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: bcd, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: web}}
"""


def _pod(name: str, node: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "web:1"}]},
    }


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_auth_and_tokens(kube: KubeApiServer, clock: SimClock, tmp_path: Path, version: str) -> None:
    """`auth can-i`, `auth whoami`, `create token`, and a token without a binding refused."""
    cluster = kube.add_cluster("k", version=version)
    admin = tmp_path / "admin"
    write_kubeconfig(admin, cluster, cluster.issue_token("admin", ttl_seconds=600))
    can = await kubectl(admin, "auth", "can-i", "delete", "nodes")
    assert (can.code, can.out.strip()) == (0, "yes"), can.err
    whoami = await kubectl(admin, "auth", "whoami", "-o", "json")
    assert whoami.code == 0, whoami.err
    assert yaml.safe_load(whoami.out)["status"]["userInfo"]["username"] == "admin"

    assert (await kubectl(admin, "create", "serviceaccount", "robot")).code == 0
    minted = await kubectl(admin, "create", "token", "robot", "--duration=20m", "--audience=api")
    assert minted.code == 0, minted.err
    robot_token = (await kubectl(admin, "create", "token", "robot")).out.strip()
    robot = tmp_path / "robot"
    write_kubeconfig(robot, cluster, robot_token)
    who = await kubectl(robot, "auth", "whoami")
    assert who.code == 0, who.err
    assert "system:serviceaccount:default:robot" in who.out
    cannot = await kubectl(robot, "auth", "can-i", "list", "pods")
    assert (cannot.code, cannot.out.strip()) == (1, "no")
    refused = await kubectl(robot, "get", "pods")
    assert refused.code != 0
    assert (
        'pods is forbidden: User "system:serviceaccount:default:robot" cannot list resource "pods" '
        'in API group "" in the namespace "default"' in refused.err
    )
    granted = await kubectl(
        admin, "create", "rolebinding", "robot-view", "--clusterrole=view", "--serviceaccount=default:robot"
    )
    assert granted.code == 0, granted.err
    assert (await kubectl(robot, "auth", "can-i", "list", "pods")).out.strip() == "yes"
    assert (await kubectl(robot, "get", "pods")).code == 0
    listed = await kubectl(robot, "auth", "can-i", "--list")  # SelfSubjectRulesReview
    assert listed.code == 0, listed.err
    rows = {line.split()[0]: line.split()[-3:] for line in listed.out.splitlines()[1:] if line.strip()}
    assert rows["pods"] == ["[get", "list", "watch]"]
    role = await kubectl(admin, "create", "clusterrole", "node-reader", "--verb=get,list", "--resource=nodes")
    assert role.code == 0, role.err
    bound = await kubectl(
        admin,
        "create",
        "clusterrolebinding",
        "robot-nodes",
        "--clusterrole=node-reader",
        "--serviceaccount=default:robot",
    )
    assert bound.code == 0, bound.err
    assert (await kubectl(robot, "get", "nodes")).code == 0


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_drain_evicts_and_honours_the_budget(
    kube: KubeApiServer, clock: SimClock, tmp_path: Path, version: str
) -> None:
    cluster = kube.add_cluster("k", version=version)
    await cluster.kubelet.add_node("gpu-1")
    await cluster.kubelet.add_node("gpu-2")
    pods = cluster.resource("v1", "Pod")
    cluster.ops.create(pods, "default", _pod("web-1", "gpu-1"), manager="t")
    cluster.ops.create(pods, "default", _pod("web-2", "gpu-2"), manager="t")
    cluster.settle()
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster, cluster.issue_token("admin", ttl_seconds=600))
    manifest = tmp_path / "pdb.yaml"
    manifest.write_text(BUDGETED)
    assert (await kubectl(config, "apply", "-f", str(manifest))).code == 0
    budgets = await kubectl(config, "get", "pdb")
    assert budgets.code == 0, budgets.err
    assert budgets.out.split("\n")[1].split()[:4] == ["bcd", "1", "N/A", "1"]

    drained = await kubectl(config, "drain", "gpu-1", "--force")
    assert drained.code == 0, drained.err
    assert "evicting pod default/web-1" in drained.out
    assert [p["metadata"]["name"] for p in cluster.objects("Pod", "default")] == ["web-2"]
    assert cluster.get_object("Node", "gpu-1")["spec"]["unschedulable"] is True  # type: ignore[index]

    if version in (VERSIONS[0], VERSIONS[-1]):  # a refused eviction costs kubectl's fixed 5 s wait before retrying
        blocked = await kubectl(config, "drain", "gpu-2", "--force", "--timeout=1s")
        assert blocked.code != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget." in blocked.err
        assert [p["metadata"]["name"] for p in cluster.objects("Pod", "default")] == ["web-2"]
    deleted = await kubectl(config, "drain", "gpu-2", "--force", "--disable-eviction")  # DELETE with DeleteOptions
    assert deleted.code == 0, deleted.err
    assert cluster.objects("Pod", "default") == []


EVERY_KIND = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  nodeName: gpu-1
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
  volumes:
  - {name: plugins, hostPath: {path: /var/lib/kubelet/device-plugins}}
  - name: token
    projected:
      sources: [{serviceAccountToken: {path: token, expirationSeconds: 3600, audience: bc}}]
  containers:
  - name: web
    image: web:1
    env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
    resources: {limits: {nvidia.com/gpu: "1", memory: 1Gi}, requests: {cpu: 500m}}
    ports: [{containerPort: 8080, protocol: TCP}]
    volumeMounts: [{name: plugins, mountPath: /var/lib/kubelet/device-plugins}]
    readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 5}
    securityContext: {privileged: true}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: 1}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      nodeSelector: {pool: gpu}
      initContainers: [{name: join, image: "agent:1", args: [join]}]
      containers: [{name: agent, image: "agent:1"}]
---
apiVersion: v1
kind: Node
metadata: {name: extra-1, labels: {pool: cpu}}
spec:
  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]
---
apiVersion: v1
kind: Event
metadata: {name: web.1, namespace: default}
involvedObject: {kind: Pod, name: web, namespace: default}
reason: Tested
message: created by kubectl
type: Normal
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: guard}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  validations: [{expression: "object.metadata.name != 'forbidden'", message: no}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: guard}
spec:
  policyName: guard
  validationActions: [Deny]
"""


BETA_ADMISSION = (
    "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies",
    "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicybindings",
)


def every_kind(minor: int) -> str:
    """EVERY_KIND as a cluster of that minor serves it: ValidatingAdmissionPolicy is v1 from 1.30, v1beta1
    (turned on) on 1.28-1.29, and not there before."""
    if minor >= 30:
        return EVERY_KIND
    documents = EVERY_KIND.split("\n---\n")
    if minor < 28:
        return "\n---\n".join(d for d in documents if "admissionregistration" not in d)
    return EVERY_KIND.replace("admissionregistration.k8s.io/v1\n", "admissionregistration.k8s.io/v1beta1\n")


@pytest.mark.parametrize("version", VERSIONS)
async def test_kubectl_create_takes_every_served_kind(
    kube: KubeApiServer, clock: SimClock, tmp_path: Path, version: str
) -> None:
    """`kubectl create -f` sends protobuf for these kinds from 1.32 on; the emulator decodes every one."""
    minor = int(version.split(".")[1])
    cluster = kube.add_cluster("k", version=version)
    if minor in (28, 29):
        cluster.enabled_apis.update(BETA_ADMISSION)
    await cluster.kubelet.add_node("gpu-1", labels={"pool": "gpu"})
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster, cluster.issue_token("admin", ttl_seconds=600))
    manifest = tmp_path / "all.yaml"
    manifest.write_text(every_kind(minor))

    created = await kubectl(config, "create", "-f", str(manifest))
    assert created.code == 0, created.err

    pod = cluster.get_object("Pod", "web", "default")
    assert pod is not None
    [container] = pod["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1", "memory": "1Gi"}
    assert container["ports"][0]["containerPort"] == 8080
    assert container["readinessProbe"]["httpGet"]["port"] == 8080  # IntOrString as an int
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    projected = pod["spec"]["volumes"][1]["projected"]["sources"][0]["serviceAccountToken"]
    assert projected == {"path": "token", "expirationSeconds": 3600, "audience": "bc"}
    daemonset = cluster.get_object("DaemonSet", "agent", "default")
    assert daemonset is not None
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert daemonset["spec"]["template"]["spec"]["initContainers"][0]["args"] == ["join"]
    node = cluster.get_object("Node", "extra-1")
    assert node is not None and node["spec"]["taints"][0]["value"] == "present"
    event = cluster.get_object("Event", "web.1", "default")
    assert event is not None and event["involvedObject"]["name"] == "web"
    binding = cluster.get_object("ValidatingAdmissionPolicyBinding", "guard")
    if minor >= 28:
        assert binding is not None and binding["spec"]["validationActions"] == ["Deny"]
        assert binding["apiVersion"] == f"admissionregistration.k8s.io/{'v1' if minor >= 30 else 'v1beta1'}"
    else:
        assert binding is None


CRITICAL_DAEMONSET = """
apiVersion: v1
kind: Namespace
metadata: {name: bc-system}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: bcd, namespace: bc-system}
spec:
  selector: {matchLabels: {app: bcd}}
  template:
    metadata: {labels: {app: bcd}}
    spec:
      priorityClassName: system-node-critical
      containers: [{name: bcd, image: "bcd:1"}]
"""


def _workload(name: str, image: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "image": image}]}}


@pytest.mark.parametrize("version", [VERSIONS[0], VERSIONS[-1]])
async def test_kubectl_shows_the_events_and_logs_a_user_is_told_to_look_at(
    kube: KubeApiServer, clock: SimClock, tmp_path: Path, version: str
) -> None:
    """What the spec sends a user to when Nodes do not join: the DaemonSet's refusal, a failed pull and a
    crash loop in `kubectl get events`, a container's own lines in `kubectl logs`, and the health endpoints."""

    async def runtime(run: PodRun, node: NodeRun) -> None:
        if run.container.image == "crash:1":
            raise RuntimeError("exit status 1")
        if run.container.image == "talk:1":
            run.log.write("joined as node nod_1 of pool pool_1")
            run.log.write("registered nvidia.com/gpu at /var/lib/kubelet/device-plugins/kubelet.sock")
        await asyncio.Event().wait()

    cluster = kube.add_cluster("k", version=version)
    cluster.kubelet.pod_runtime = runtime
    install_gke_system(cluster)
    cluster.kubelet.image_pull_failures.add("missing:*")
    await cluster.kubelet.add_node("gpu-1")
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster, cluster.issue_token("admin", ttl_seconds=3600))
    manifest = tmp_path / "bcd.yaml"
    manifest.write_text(CRITICAL_DAEMONSET)
    applied = await kubectl(config, "apply", "--server-side", "-f", str(manifest))
    assert applied.code == 0, applied.err
    pods = cluster.resource("v1", "Pod")
    for name, image in (("talker", "talk:1"), ("puller", "missing:1"), ("crasher", "crash:1")):
        cluster.ops.create(pods, "default", _workload(name, image), manager="test")
    cluster.settle()
    for _ in range(20):  # the crash, then the kubelet's 10 s back-off
        await asyncio.sleep(0.01)
    clock.advance(11)
    await asyncio.sleep(0.05)

    refused = await kubectl(config, "get", "events", "-n", "bc-system")
    assert refused.code == 0, refused.err
    header, *rows = refused.out.strip().split("\n")
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    (row,) = rows
    assert row.split()[1:4] == ["Warning", "FailedCreate", "daemonset/bcd"]
    assert row.endswith(
        "Error creating: insufficient quota to match these scopes: "
        "[{PriorityClass In [system-node-critical system-cluster-critical]}]"
    )
    events = await kubectl(config, "get", "events", "-n", "default")
    assert events.code == 0, events.err
    seen = {tuple(line.split()[1:4]) for line in events.out.strip().split("\n")[1:]}
    assert ("Warning", "Failed", "pod/puller") in seen
    assert ("Warning", "BackOff", "pod/crasher") in seen
    assert 'Failed to pull image "missing:1"' in events.out
    assert "Back-off restarting failed container c in pod crasher_default(" in events.out

    logs = await kubectl(config, "logs", "talker")
    assert logs.code == 0, logs.err
    assert logs.out.splitlines() == [
        "joined as node nod_1 of pool pool_1",
        "registered nvidia.com/gpu at /var/lib/kubelet/device-plugins/kubelet.sock",
    ]
    tailed = await kubectl(config, "logs", "talker", "--tail=1", "--timestamps")
    assert tailed.code == 0, tailed.err
    assert tailed.out.split(" ", 1)[1] == "registered nvidia.com/gpu at /var/lib/kubelet/device-plugins/kubelet.sock\n"
    waiting = await kubectl(config, "logs", "puller")
    assert waiting.code != 0
    assert 'container "c" in pod "puller" is waiting to start: ErrImagePull' in waiting.err

    for path in ("/healthz", "/readyz", "/livez"):
        health = await kubectl(config, "get", "--raw", path)
        assert (health.code, health.out) == (0, "ok"), health.err


async def test_kubectl_get_pods_shows_a_failed_pull_backing_off_then_running(
    kube: KubeApiServer, clock: SimClock, tmp_path: Path
) -> None:
    """`kubectl get pods` reads ErrImagePull, ImagePullBackOff between the kubelet's pulls, then Running once the
    registry serves the image again, with no one touching the pod."""
    cluster = kube.add_cluster("k")
    cluster.kubelet.image_pull_failures.add("missing:*")
    await cluster.kubelet.add_node("gpu-1")
    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, cluster, cluster.issue_token("admin", ttl_seconds=3600))
    cluster.ops.create(cluster.resource("v1", "Pod"), "default", _workload("puller", "missing:1"), manager="test")
    cluster.settle()

    async def status() -> str:
        listed = await kubectl(config, "get", "pods", "--no-headers")
        assert listed.code == 0, listed.err
        name, ready, phase, *_ = listed.out.split()
        assert (name, ready) == ("puller", "0/1") or phase == "Running"
        return phase

    seen = [await status()]
    for seconds in (10, 10, 10):  # pulls fail at 0 and 10; backed off from 20 until 30
        clock.advance(seconds)
        await asyncio.sleep(0.01)
        seen.append(await status())
    assert seen == ["ErrImagePull", "ErrImagePull", "ImagePullBackOff", "ErrImagePull"]
    cluster.kubelet.image_pull_failures.clear()
    clock.advance(40)  # the next pull, at 70
    await asyncio.sleep(0.01)
    assert await status() == "Running"
