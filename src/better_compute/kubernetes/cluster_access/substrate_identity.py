"""better-compute's own identity on an adopted cluster: made, reached as, and taken back.

On a cluster it adopts, the substrate works as the `bc-substrate` ServiceAccount in
`bc-access`, bound to cluster-admin, rather than as the provider account's own admin:
the identity is one the cluster can take back (`revoke_substrate_identity`), and
teardown does, last. With the provider's admin credential the substrate makes exactly
what revoking takes back:

    Namespace          bc-access      only when absent; then labelled as better-compute's
    ServiceAccount     bc-access/bc-substrate
    ClusterRoleBinding bc-substrate   -> cluster-admin

and the cluster-wide objects that grant nothing on their own and stay after teardown:

    ClusterRole                       better-compute:edit (what a tenant binding may grant on bcd)
    ValidatingAdmissionPolicy(+Binding) better-compute-access-guard: bc-substrate may not create
                                      or change RBAC bindings, so revoking it leaves no identity

The guard is written at the version the cluster serves (`guard_api_version`, asked by listing):
admissionregistration.k8s.io/v1 from Kubernetes 1.30, else v1beta1, which 1.28 and 1.29 serve only
where the cluster turned that beta API on (GKE: `enableK8sBetaApis`). A cluster serving neither is
refused before anything is made there: without the guard, revoking bc-substrate could leave access.

Each object is read first and created only when missing, never applied over what is
there. Then a 600 s token is requested for bc-substrate (TokenRequest), and the run's
client uses that token; the provider's credential is dropped with the bootstrap client.

Revoking, on the provider's admin client: the binding and the ServiceAccount go when they
carry `app.kubernetes.io/managed-by=better-compute` (an owner's own objects of those names
stay), and the namespace goes too, but only when better-compute made it (it carries that
label) and no subject is left in it (no ServiceAccount but the `default` one every namespace
has). bc-substrate's tokens are bound to its ServiceAccount and die with it. Whatever is
already gone counts as removed, so a retried teardown finishes where the last one stopped.
This is the same on every provider, so it lives here once: the drivers mint the admin
credential and make nothing in the cluster of their own (EKS leaves the tenant's access entry
alone), so they have nothing to revoke.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_global_resource
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, ServiceAccount, ServiceAccountToken
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.cluster_access.kube_api import create_if_absent, kube_call, kube_error
from better_compute.kubernetes.names import MANAGED_BY_KEY, MANAGED_BY_VALUE
from better_compute.kubernetes.provider import CREDENTIAL_TTL_SECONDS, ClusterCredentials

__all__ = [
    "ACCESS_GUARD",
    "ACCESS_NAMESPACE",
    "CLUSTER_ROLE",
    "EDIT_ROLE",
    "GUARD_API_VERSIONS",
    "SUBSTRATE_SUBJECT",
    "SUBSTRATE_USERNAME",
    "ensure_substrate_identity",
    "guard_api_version",
    "identity_objects",
    "revoke_substrate_identity",
    "substrate_credentials",
]

ACCESS_NAMESPACE = "bc-access"
SUBSTRATE_SUBJECT = "bc-substrate"
"""The ServiceAccount's name, and its ClusterRoleBinding's."""
CLUSTER_ROLE = "cluster-admin"
"""What the binding grants."""
_DEFAULT_ACCOUNT = "default"

EDIT_ROLE = "better-compute:edit"
ACCESS_GUARD = "better-compute-access-guard"
SUBSTRATE_USERNAME = f"system:serviceaccount:{ACCESS_NAMESPACE}:{SUBSTRATE_SUBJECT}"
_MANAGED = {MANAGED_BY_KEY: MANAGED_BY_VALUE}
_RBAC = "rbac.authorization.k8s.io/v1"
_ADMISSION_GROUP = "admissionregistration.k8s.io"
GUARD_API_VERSIONS = (f"{_ADMISSION_GROUP}/v1", f"{_ADMISSION_GROUP}/v1beta1")
"""The versions the guard can be written at, the preferred first."""
# lightkube's models no longer carry v1beta1 (removed from Kubernetes after 1.3x): a generic resource stands in
_POLICIES: dict[str, Any] = {
    version: create_global_resource(
        _ADMISSION_GROUP, version.rsplit("/", 1)[1], "ValidatingAdmissionPolicy", "validatingadmissionpolicies"
    )
    for version in GUARD_API_VERSIONS
}
create_global_resource(  # registered for codecs.from_dict, as the policy's is above
    _ADMISSION_GROUP, "v1beta1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings"
)


async def guard_api_version(client: AsyncClient) -> str:
    """The newest version of `GUARD_API_VERSIONS` the cluster serves: the one whose policy collection lists
    (a collection answers 404 only when its version is not served). INVALID_STATE when it serves neither."""
    for api_version in GUARD_API_VERSIONS:
        try:
            async for _ in client.list(_POLICIES[api_version], chunk_size=1):
                break
            return api_version
        except ApiError as exc:
            if exc.status.code != 404:
                raise kube_error(f"listing {api_version} ValidatingAdmissionPolicies", exc) from exc
    raise ComputeError(
        ErrorCode.INVALID_STATE,
        "the cluster serves no ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1 from Kubernetes 1.30; "
        "v1beta1 on 1.28-1.29 only where that beta API is turned on), and better-compute adopts a cluster only "
        "where it can keep its own identity from granting access to anyone: upgrade the cluster to 1.30, or turn on "
        "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies and .../validatingadmissionpolicybindings "
        "(GKE: gcloud container clusters update --enable-kubernetes-unstable-apis=...)",
        reason="noAdmissionPolicyApi",
    )


def identity_objects(guard_api: str = GUARD_API_VERSIONS[0]) -> list[dict[str, Any]]:
    """What the substrate makes on an adopted cluster, in the order it makes them (the guard at `guard_api`)."""
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ACCESS_NAMESPACE, "labels": _MANAGED}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SUBSTRATE_SUBJECT, "namespace": ACCESS_NAMESPACE, "labels": _MANAGED},
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": SUBSTRATE_SUBJECT, "labels": _MANAGED},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CLUSTER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": SUBSTRATE_SUBJECT, "namespace": ACCESS_NAMESPACE}],
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": EDIT_ROLE, "labels": _MANAGED},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get", "list", "watch", "patch"]},
                {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch", "delete"]},
            ],
        },
        {
            "apiVersion": guard_api,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": ACCESS_GUARD, "labels": _MANAGED},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": ["rbac.authorization.k8s.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE", "UPDATE"],
                            "resources": ["rolebindings", "clusterrolebindings"],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": f"request.userInfo.username != '{SUBSTRATE_USERNAME}'",
                        "message": f"{SUBSTRATE_SUBJECT} grants no access to anyone: revoking it must leave none",
                    }
                ],
            },
        },
        {
            "apiVersion": guard_api,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": ACCESS_GUARD, "labels": _MANAGED},
            "spec": {"policyName": ACCESS_GUARD, "validationActions": ["Deny"]},
        },
    ]


async def ensure_substrate_identity(client: AsyncClient, guard_api: str = GUARD_API_VERSIONS[0]) -> None:
    """Make (on the provider's admin client) whatever of `identity_objects(guard_api)` is missing."""
    for manifest in identity_objects(guard_api):
        await create_if_absent(client, manifest)


async def substrate_credentials(client: AsyncClient, admin: ClusterCredentials, now: datetime) -> ClusterCredentials:
    """A 600 s token of bc-substrate, requested on the admin client, for the same endpoint."""
    request = ServiceAccountToken(
        metadata=ObjectMeta(), spec=TokenRequestSpec(audiences=[], expirationSeconds=int(CREDENTIAL_TTL_SECONDS))
    )
    minted = await kube_call(
        f"requesting a token for {ACCESS_NAMESPACE}/{SUBSTRATE_SUBJECT}",
        client.create(request, SUBSTRATE_SUBJECT, namespace=ACCESS_NAMESPACE),
    )
    token = minted.status.token if minted.status else None
    if not token:
        raise ComputeError(
            ErrorCode.UNAVAILABLE, f"the cluster minted no token for {ACCESS_NAMESPACE}/{SUBSTRATE_SUBJECT}"
        )
    redact_value(token)
    return ClusterCredentials(
        endpoint=admin.endpoint,
        ca_data=admin.ca_data,
        token=token,
        expires_at=now + timedelta(seconds=CREDENTIAL_TTL_SECONDS),
    )


async def _delete_if_present(client: AsyncClient, kind: type[Any], name: str, namespace: str | None = None) -> None:
    try:
        await client.delete(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code != 404:
            raise


async def _delete_if_ours(client: AsyncClient, kind: type[Any], name: str, namespace: str | None = None) -> None:
    """Delete the object only when it carries better-compute's label: an owner's own `bc-substrate` stays."""
    try:
        found = await client.get(kind, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return
        raise
    labels = (found.metadata.labels if found.metadata else None) or {}
    if labels.get(MANAGED_BY_KEY) == MANAGED_BY_VALUE:
        await _delete_if_present(client, kind, name, namespace)


async def _namespace_is_ours_and_empty(client: AsyncClient) -> bool:
    try:
        namespace = await client.get(Namespace, ACCESS_NAMESPACE)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    labels = (namespace.metadata.labels if namespace.metadata else None) or {}
    if labels.get(MANAGED_BY_KEY) != MANAGED_BY_VALUE:
        return False
    async for account in client.list(ServiceAccount, namespace=ACCESS_NAMESPACE):
        if account.metadata is not None and account.metadata.name != _DEFAULT_ACCOUNT:
            return False
    return True


async def _remove(client: AsyncClient) -> None:
    await _delete_if_ours(client, ClusterRoleBinding, SUBSTRATE_SUBJECT)
    await _delete_if_ours(client, ServiceAccount, SUBSTRATE_SUBJECT, ACCESS_NAMESPACE)
    if await _namespace_is_ours_and_empty(client):
        await _delete_if_present(client, Namespace, ACCESS_NAMESPACE)


async def revoke_substrate_identity(client: AsyncClient) -> None:
    """Remove `bc-substrate`, its binding, and `bc-access` when ours and empty, through `client`
    (the provider's admin credential). A refused credential is PERMISSION_DENIED; any other
    refusal, or a cluster API that does not answer, is UNAVAILABLE (the teardown retries)."""
    try:
        await _remove(client)
    except ApiError as exc:
        code = ErrorCode.PERMISSION_DENIED if exc.status.code in (401, 403) else ErrorCode.UNAVAILABLE
        raise ComputeError(code, f"the cluster refused to revoke {SUBSTRATE_SUBJECT}: {exc.status.message}") from exc
    except httpx2.HTTPError as exc:
        raise ComputeError(
            ErrorCode.UNAVAILABLE,
            f"the cluster API did not answer while revoking {SUBSTRATE_SUBJECT}: {type(exc).__name__}",
        ) from exc
