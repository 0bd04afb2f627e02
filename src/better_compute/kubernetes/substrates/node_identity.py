"""Which Node a joining bcd is: its pod's projected ServiceAccount token, verified by the cluster.

A join names its node in its inventory, and the join token is readable on every Node of
the pool, so the name alone proves nothing. bcd's DaemonSet mounts a projected token for
the audience `JOIN_AUDIENCE`; the kubelet has it bound to the pod and, in its claims, to
the Node the pod runs on. At join the substrate sends it to the cluster's TokenReview
with its own credential and admits the join only when the
cluster says it is valid for that audience, belongs to bcd's ServiceAccount in bcd's
namespace, is bound to a pod, and names the Node the join claims to be. The same client
reads that Node, which matches the node at join (join_match.py).

A join check is not a run and holds no admin credential: it works as the join reviewer of
`kubernetes.cluster_access.join_reviewer`, a ServiceAccount that can only create TokenReviews, whose 600 s
token is kept in memory and shared by the joins of one cluster (a pool of many Nodes joins
within a minute or two, and minting per join would cost a provider call per Node).
"""

from __future__ import annotations

import logging

from lightkube.models.authentication_v1 import TokenReviewSpec
from lightkube.resources.authentication_v1 import TokenReview
from sqlalchemy import select

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact_value
from better_compute.gateway.joining import Proof
from better_compute.kubernetes.cluster_access.kube_api import credentials_client, kube_call
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.names import JOIN_AUDIENCE
from better_compute.kubernetes.substrates.join_match import node_capacity, record_joining_node
from better_compute.kubernetes.substrates.manifests import NAMESPACE, SERVICE_ACCOUNT
from better_compute.kubernetes.tables import ClusterRow, SubstrateRow

__all__ = ["SubstrateNodeIdentity"]

log = logging.getLogger(__name__)

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
NODE_UID_EXTRA = "authentication.kubernetes.io/node-uid"
BCD_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"


def _denied(message: str) -> ComputeError:
    return ComputeError(ErrorCode.PERMISSION_DENIED, message, "/identityToken")


class SubstrateNodeIdentity:
    """The gateway's identity check (`gateway.joining.NodeIdentityCheck`) for substrate pools."""

    def __init__(self, k: KubernetesContext) -> None:
        self.k = k

    async def __call__(self, *, pool_id: str, node_name: str, identity_token: str | None) -> Proof | None:
        async with self.k.db.read() as session:
            found = (
                await session.execute(
                    select(ClusterRow.tenant_id, ClusterRow.account, ClusterRow.provider_cluster_id)
                    .select_from(SubstrateRow)
                    .outerjoin(ClusterRow, ClusterRow.id == SubstrateRow.cluster_id)
                    .where(SubstrateRow.pool_id == pool_id)
                )
            ).first()
        if found is None:
            return None  # not a substrate pool: its nodes prove nothing beyond the token
        if identity_token is None:
            raise _denied(
                "a node of a Kubernetes substrate joins with its pod's ServiceAccount token "
                "(BCD_IDENTITY_TOKEN_FILE, the DaemonSet's identity volume); none was sent"
            )
        redact_value(identity_token)
        tenant_id, account_name, provider_cluster_id = found
        if provider_cluster_id is None:  # no cluster recorded, or not made yet
            raise ComputeError(ErrorCode.UNAVAILABLE, "the pool's cluster is not ready: try again")
        account, driver = await self.k.account(tenant_id, account_name)
        review = TokenReview(spec=TokenReviewSpec(token=identity_token, audiences=[JOIN_AUDIENCE]))
        reviewer = await self.k.reviewers.get(driver, account, provider_cluster_id, pool_id)
        async with credentials_client(reviewer) as client:
            answer = await kube_call("reviewing the joining node's ServiceAccount token", client.create(review))
            spot = await node_capacity(client, pool_id, node_name)  # kept only once the review names this Node
        status = answer.status
        user = status.user if status is not None else None
        if status is None or not status.authenticated or user is None:
            raise _denied("the cluster does not accept the node's ServiceAccount token (expired, or its pod is gone)")
        if JOIN_AUDIENCE not in (status.audiences or []):
            raise _denied(f"the node's ServiceAccount token is not for the audience {JOIN_AUDIENCE}")
        if user.username != BCD_USER:
            raise _denied(f"the node's ServiceAccount token belongs to {user.username}, not bcd's {BCD_USER}")
        extra = user.extra or {}
        if not extra.get(POD_NAME_EXTRA):
            raise _denied("the node's ServiceAccount token is not bound to a pod")
        named = list(extra.get(NODE_NAME_EXTRA) or [])
        if named != [node_name]:
            shown = named[0] if named else "no Node"
            log.warning("pool %s: a join as Node %s presented the identity of %s; refused", pool_id, node_name, shown)
            raise _denied(f"the node's ServiceAccount token names {shown}, not {node_name}")
        uids = list(extra.get(NODE_UID_EXTRA) or [])
        if spot is not None:
            await record_joining_node(
                self.k.db, pool_id=pool_id, node_name=node_name, spot=spot, now=self.k.clock.now()
            )
        return Proof(machine=uids[0] if uids else None)  # the Node's uid: a Node re-created under the name is another
