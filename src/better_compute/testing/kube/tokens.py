"""The TokenRequest subresource: `POST .../serviceaccounts/<name>/token`.

It mints a service-account JWT (satokens.py) for the requested audiences (the
API server's own by default), bound to the account and, with
`spec.boundObjectRef` naming a Pod, to that pod and the node it runs on: the
token dies with any of them. It expires after `spec.expirationSeconds` (default
one hour, at least ten minutes, as the real server requires).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.satokens import API_AUDIENCE, BoundObject
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import timestamp

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["mint_account_token", "token_request"]

_DEFAULT_SECONDS = 3600
_MIN_SECONDS = 600


def _invalid(name: str, message: str) -> KubeError:
    return KubeError(
        422,
        "Invalid",
        f'TokenRequest.authentication.k8s.io "{name}" is invalid: {message}',
        {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"},
    )


def _bound(cluster: KubeCluster, namespace: str, name: str, ref: dict[str, Any]) -> tuple[BoundObject, ...]:
    if ref.get("kind") != "Pod":
        raise _invalid(
            name, f'spec.boundObjectRef.kind: Unsupported value: "{ref.get("kind")}": supported values: "Pod"'
        )
    pod = cluster.ops.get(cluster.resource("v1", "Pod"), namespace, ref.get("name", ""))
    uid = pod["metadata"]["uid"]
    if ref.get("uid") and ref["uid"] != uid:
        raise KubeError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods "{pod["metadata"]["name"]}": the UID in the bound object '
            f"reference ({ref['uid']}) does not match the UID in record. The object might have been deleted "
            "and then recreated",
            {"name": pod["metadata"]["name"], "kind": "pods"},
        )
    bound = [BoundObject("pod", pod["metadata"]["name"], uid)]
    node_name = pod.get("spec", {}).get("nodeName")
    node = cluster.store.peek(cluster.resource("v1", "Node"), "", node_name) if node_name else None
    if node is not None:
        bound.append(BoundObject("node", node["metadata"]["name"], node["metadata"]["uid"]))
    return tuple(bound)


def mint_account_token(
    cluster: KubeCluster,
    namespace: str,
    name: str,
    seconds: int,
    audiences: list[str] | None = None,
    pod: str | None = None,
) -> dict[str, Any]:
    """What TokenRequest answers; the kubelet uses it for a pod's projected token."""
    account = cluster.ops.get(cluster.resource("v1", "ServiceAccount"), namespace, name)
    bound = _bound(cluster, namespace, name, {"kind": "Pod", "name": pod}) if pod else ()
    audiences = audiences or [API_AUDIENCE]
    token, expires_at = cluster.sa_tokens.issue(namespace, account, seconds, audiences, bound)
    spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": seconds}
    if bound:
        spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", "name": bound[0].name, "uid": bound[0].uid}
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": spec,
        "status": {"token": token, "expirationTimestamp": timestamp(expires_at)},
    }


def token_request(cluster: KubeCluster, namespace: str, name: str, body: Any) -> dict[str, Any]:
    spec = (body or {}).get("spec") or {}
    seconds = int(spec.get("expirationSeconds") or _DEFAULT_SECONDS)
    if seconds < _MIN_SECONDS:
        raise _invalid(name, "spec.expirationSeconds: Invalid value: may not specify a duration less than 10 minutes")
    cluster.ops.get(cluster.resource("v1", "ServiceAccount"), namespace, name)
    ref = spec.get("boundObjectRef")
    if ref:
        _bound(cluster, namespace, name, ref)
    pod = ref.get("name") if ref else None
    return mint_account_token(cluster, namespace, name, seconds, list(spec.get("audiences") or []), pod)
