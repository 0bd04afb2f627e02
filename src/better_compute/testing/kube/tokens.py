"""The TokenRequest subresource: `POST .../serviceaccounts/<name>/token`.

It mints a token bound to the service account (deleting the account revokes
it) that expires after `spec.expirationSeconds` (default one hour, at least ten
minutes, as the real server requires).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import timestamp

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["token_request"]

_DEFAULT_SECONDS = 3600
_MIN_SECONDS = 600


def token_request(cluster: KubeCluster, namespace: str, name: str, body: Any) -> dict[str, Any]:
    account = cluster.ops.get(cluster.resource("v1", "ServiceAccount"), namespace, name)
    spec = (body or {}).get("spec") or {}
    seconds = int(spec.get("expirationSeconds") or _DEFAULT_SECONDS)
    if seconds < _MIN_SECONDS:
        raise KubeError(
            422,
            "Invalid",
            f'TokenRequest.authentication.k8s.io "{name}" is invalid: spec.expirationSeconds: '
            "Invalid value: may not specify a duration less than 10 minutes",
            {"name": name, "group": "authentication.k8s.io", "kind": "TokenRequest"},
        )
    token, expires_at = cluster.tokens.issue(
        f"system:serviceaccount:{namespace}:{name}",
        seconds,
        ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        bound_uid=account["metadata"]["uid"],
    )
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": {
            "audiences": spec.get("audiences") or ["https://kubernetes.default.svc"],
            "expirationSeconds": seconds,
        },
        "status": {"token": token, "expirationTimestamp": timestamp(expires_at)},
    }
