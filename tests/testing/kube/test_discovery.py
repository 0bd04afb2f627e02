"""Discovery documents and /version, as kubectl reads them."""

from __future__ import annotations

from typing import Any

import httpx2

from better_compute.testing.kube import KubeApiServer


async def test_version(raw: httpx2.AsyncClient, kube: KubeApiServer) -> None:
    body = (await raw.get("version")).json()
    assert (body["major"], body["minor"], body["gitVersion"]) == ("1", "31", "v1.31.2")
    other = kube.add_cluster("old", version="1.27.9")
    async with httpx2.AsyncClient(verify=False) as http:
        assert (await http.get(f"{other.endpoint}/version")).json()["gitVersion"] == "v1.27.9"


async def test_api_and_apis(raw: httpx2.AsyncClient) -> None:
    api = (await raw.get("api")).json()
    assert (api["kind"], api["versions"]) == ("APIVersions", ["v1"])
    groups = (await raw.get("apis")).json()
    assert groups["kind"] == "APIGroupList"
    names = {g["name"]: g["preferredVersion"]["groupVersion"] for g in groups["groups"]}
    assert names == {
        "apps": "apps/v1",
        "rbac.authorization.k8s.io": "rbac.authorization.k8s.io/v1",
        "admissionregistration.k8s.io": "admissionregistration.k8s.io/v1",
        "policy": "policy/v1",
        "scheduling.k8s.io": "scheduling.k8s.io/v1",
        "authentication.k8s.io": "authentication.k8s.io/v1",
        "authorization.k8s.io": "authorization.k8s.io/v1",
    }
    group = (await raw.get("apis/apps")).json()
    assert (group["kind"], group["name"]) == ("APIGroup", "apps")


async def test_core_resource_list(raw: httpx2.AsyncClient) -> None:
    body = (await raw.get("api/v1")).json()
    assert (body["kind"], body["groupVersion"]) == ("APIResourceList", "v1")
    resources = {r["name"]: r for r in body["resources"]}
    assert set(resources) >= {
        "namespaces",
        "nodes",
        "nodes/status",
        "configmaps",
        "secrets",
        "serviceaccounts",
        "serviceaccounts/token",
        "pods",
        "pods/status",
        "events",
    }
    assert (resources["nodes"]["kind"], resources["nodes"]["namespaced"], resources["nodes"]["shortNames"]) == (
        "Node",
        False,
        ["no"],
    )
    assert resources["pods"]["namespaced"] is True
    assert "deletecollection" in resources["configmaps"]["verbs"]
    assert resources["serviceaccounts/token"]["kind"] == "TokenRequest"


async def test_group_resource_lists(raw: httpx2.AsyncClient) -> None:
    apps = (await raw.get("apis/apps/v1")).json()
    assert [(r["name"], r["kind"]) for r in apps["resources"]] == [
        ("daemonsets", "DaemonSet"),
        ("daemonsets/status", "DaemonSet"),
    ]
    rbac = {r["name"] for r in (await raw.get("apis/rbac.authorization.k8s.io/v1")).json()["resources"]}
    assert rbac == {"clusterroles", "clusterrolebindings", "roles", "rolebindings"}
    admission = (await raw.get("apis/admissionregistration.k8s.io/v1")).json()["resources"]
    assert {r["kind"] for r in admission} == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert (await raw.get("apis/batch/v1")).status_code == 404
    assert (await raw.get("apis/apps/v1/deployments")).status_code == 404


async def test_openapi_v3_declares_server_side_field_validation(raw: httpx2.AsyncClient) -> None:
    index = (await raw.get("openapi/v3")).json()["paths"]
    url = index["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=")
    document = (await raw.get(url.lstrip("/"))).json()
    patch = document["paths"]["/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "apps", "version": "v1", "kind": "DaemonSet"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


async def test_unknown_cluster_is_404(kube: KubeApiServer) -> None:
    async with httpx2.AsyncClient(verify=False) as http:
        response = await http.get(f"{kube.url}/clusters/nope/version")
    assert response.status_code == 404


BETA_POLICIES = "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies"
BETA_BINDINGS = "admissionregistration.k8s.io/v1beta1/validatingadmissionpolicybindings"


async def test_each_version_serves_the_admission_policy_api_it_serves_by_default(kube: KubeApiServer) -> None:
    """v1 from 1.30 (GA); v1beta1 on 1.28-1.29 only where the beta API is turned on (resources.py's sources)."""
    old = kube.add_cluster("old", version="1.29.10")
    beta = kube.add_cluster("beta", version="1.29.10")
    beta.enabled_apis.update({BETA_POLICIES, BETA_BINDINGS})
    new = kube.add_cluster("new", version="1.30.5")
    policy = {
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "guard"},
        "spec": {"validations": [{"expression": "true"}]},
    }

    async def served(cluster: Any) -> dict[str, Any]:
        headers = {"authorization": f"Bearer {cluster.issue_token('admin', ttl_seconds=600)}"}
        async with httpx2.AsyncClient(verify=False, base_url=cluster.endpoint, headers=headers) as http:
            groups = {
                g["name"]: [v["version"] for v in g["versions"]] for g in (await http.get("/apis")).json()["groups"]
            }
            codes = {
                version: (
                    await http.get(f"/apis/admissionregistration.k8s.io/{version}/validatingadmissionpolicies")
                ).status_code
                for version in ("v1", "v1beta1")
            }
            created = await http.post(
                "/apis/admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies",
                json={**policy, "apiVersion": "admissionregistration.k8s.io/v1beta1"},
            )
            read = await http.get("/apis/admissionregistration.k8s.io/v1beta1/validatingadmissionpolicies/guard")
        return {
            "group": groups.get("admissionregistration.k8s.io"),
            "lists": codes,
            "created": created.status_code,
            "reads as": read.json()["apiVersion"] if read.status_code == 200 else read.status_code,
        }

    assert await served(old) == {"group": None, "lists": {"v1": 404, "v1beta1": 404}, "created": 404, "reads as": 404}
    assert await served(beta) == {
        "group": ["v1beta1"],
        "lists": {"v1": 404, "v1beta1": 200},
        "created": 201,
        "reads as": "admissionregistration.k8s.io/v1beta1",
    }
    assert (await served(new))["group"] == ["v1"]
    assert (await served(new))["lists"] == {"v1": 200, "v1beta1": 404}
