"""Making better-compute's identity on an adopted cluster, and reaching the cluster as it.

On a cluster it adopts, the substrate works as the `bc-substrate` ServiceAccount in
`bc-access`, bound to cluster-admin, rather than as the provider account's own admin:
the identity is one the cluster can take back (`access.revoke_substrate_access`), and
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
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from lightkube import ApiError, AsyncClient, codecs
from lightkube.generic_resource import create_global_resource
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ServiceAccountToken

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact_value
from better_compute.kubernetes.access import (
    ACCESS_NAMESPACE,
    CLUSTER_ROLE,
    MANAGED_BY_KEY,
    MANAGED_BY_VALUE,
    SUBSTRATE_SUBJECT,
)
from better_compute.kubernetes.provider import CREDENTIAL_TTL_SECONDS, ClusterCredentials
from better_compute.kubernetes.substrates.cluster_api import kube_call, kube_error

__all__ = [
    "ACCESS_GUARD",
    "EDIT_ROLE",
    "GUARD_API_VERSIONS",
    "SUBSTRATE_USERNAME",
    "create_if_absent",
    "ensure_substrate_identity",
    "guard_api_version",
    "identity_objects",
    "substrate_credentials",
]

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


async def create_if_absent(client: AsyncClient, manifest: dict[str, Any]) -> None:
    """Create the object unless one of its name is there: what is there is left as it is (and is not ours)."""
    obj = codecs.from_dict(manifest)
    kind: Any = type(obj)
    meta = manifest["metadata"]
    what = f"{manifest['kind']} {meta['name']}"
    try:
        await client.get(kind, meta["name"], namespace=meta.get("namespace"))
        return
    except ApiError as exc:
        if exc.status.code != 404:
            raise kube_error(f"reading {what}", exc) from exc
    try:
        await client.create(obj)
    except ApiError as exc:
        if exc.status.code != 409:  # made meanwhile: it is there, which is all we want
            raise kube_error(f"creating {what}", exc) from exc


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
