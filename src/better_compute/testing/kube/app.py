"""One cluster's HTTP surface: authentication, discovery and the resource verbs.

Requests arrive here with the `/clusters/<id>` prefix already stripped. Every
failure is a `Status` body with the real server's code and reason. After each
request the cluster settles (garbage collection, DaemonSet scheduling), so a
client that reads right after a write sees what the controllers made of it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from better_compute.testing.kube import discovery, openapi
from better_compute.testing.kube.disruption import evict
from better_compute.testing.kube.openapi_v2 import OPENAPI_V2_PROTOBUF, openapi_v2_document
from better_compute.testing.kube.operations import APPLY, DeleteOptions
from better_compute.testing.kube.podlogs import pod_log
from better_compute.testing.kube.protobuf import PROTOBUF, decode_protobuf
from better_compute.testing.kube.rbac import Attributes, forbidden
from better_compute.testing.kube.resources import ResourceType
from better_compute.testing.kube.reviews import answer_review
from better_compute.testing.kube.routing import Target, parse_resource_path
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.tables import render_table
from better_compute.testing.kube.tokens import token_request

if TYPE_CHECKING:
    from better_compute.testing.kube.cluster import KubeCluster

__all__ = ["handle", "health"]

_HEALTH_CHECKS = {
    "healthz": ("ping", "log", "etcd", "poststarthook/rbac/bootstrap-roles"),
    "livez": ("ping", "log", "etcd", "poststarthook/rbac/bootstrap-roles"),
    "readyz": ("ping", "log", "etcd", "informer-sync", "poststarthook/rbac/bootstrap-roles", "shutdown"),
}


def _json(body: Any, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status)


async def handle(cluster: KubeCluster, request: Request, path: str) -> Response:
    """Answer one request for `cluster`; `path` is what follows the cluster prefix."""
    if not await cluster.wait_responsive():
        return _json(KubeError(503, "ServiceUnavailable", "the server is shutting down").body(), 503)
    try:
        response = await _dispatch(cluster, request, path)
    except KubeError as error:
        response = _json(error.body(), error.code)
    cluster.settle(everything=False)
    return response


def health(segments: list[str], verbose: bool) -> Response | None:
    """`/healthz`, `/livez`, `/readyz` and their single checks, public as on a real cluster."""
    if not segments or segments[0] not in _HEALTH_CHECKS:
        return None
    checks = _HEALTH_CHECKS[segments[0]]
    check = "/".join(segments[1:])
    if check and check not in checks:
        raise KubeError.path_not_found()
    if not verbose or check:
        return Response("ok", media_type="text/plain")
    lines = [f"[+]{name} ok" for name in checks]
    return Response("\n".join([*lines, f"{segments[0]} check passed", ""]), media_type="text/plain")


def _attributes(request: Request, segments: list[str], target: Target | None) -> Attributes:
    """What the authorizer is asked about this request."""
    method = request.method
    if target is None:
        return Attributes(verb=method.lower(), path="/" + "/".join(segments))
    rt = target.resource
    if target.name is None:
        watch = request.query_params.get("watch") in ("true", "1")
        verbs = {"GET": "watch" if watch else "list", "POST": "create", "DELETE": "deletecollection"}
    else:
        verbs = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    namespace = target.namespace or ""
    if rt.kind == "Namespace" and target.name:
        namespace = target.name
    return Attributes(
        verb=verbs.get(method, method.lower()),
        group=rt.group,
        resource=rt.plural,
        subresource=target.subresource,
        namespace=namespace,
        name=target.name or "",
    )


async def _dispatch(cluster: KubeCluster, request: Request, path: str) -> Response:
    segments = [s for s in path.split("/") if s]
    if segments == ["version"]:
        return _json(discovery.version_info(cluster.version))
    answer = health(segments, "verbose" in request.query_params)
    if answer is not None:
        return answer
    user = cluster.authenticate(request.headers.get("authorization", ""))
    if user is None:
        raise KubeError.unauthorized()
    target = parse_resource_path(segments)
    if target is not None and target.resource not in cluster.served():
        raise KubeError.path_not_found()  # another version's kind, or a beta API this cluster has off
    attributes = _attributes(request, segments, target)
    if cluster.authorize(user, attributes) is None:
        raise forbidden(user, attributes)
    failure = cluster.take_failure(attributes)
    if failure is not None:
        raise failure
    if segments == [".well-known", "openid-configuration"] and request.method == "GET":
        return _json(cluster.sa_tokens.openid_configuration(f"{cluster.endpoint}/openid/v1/jwks"))
    if segments == ["openid", "v1", "jwks"] and request.method == "GET":
        return JSONResponse(cluster.sa_tokens.jwks(), media_type="application/jwk-set+json")
    if segments == ["openapi", "v2"] and request.method == "GET":
        return Response(openapi_v2_document(cluster.version, cluster.served()), media_type=OPENAPI_V2_PROTOBUF)
    document = _discovery(cluster, request, segments)
    if document is not None:
        return _json(document)
    if target is None:
        raise KubeError.path_not_found()
    if request.query_params.get("dryRun"):
        raise KubeError.bad_request("dryRun is not supported by the Kubernetes API emulator")
    if not target.resource.stored:
        if request.method != "POST" or target.name is not None:
            raise KubeError.method_not_allowed(request.method)
        return _json(answer_review(cluster, target.resource, user, await _body(request)), 201)
    return await _resource(cluster, request, target)


def _discovery(cluster: KubeCluster, request: Request, segments: list[str]) -> dict[str, Any] | None:
    if request.method != "GET":
        return None
    served = cluster.served()
    if segments[:2] == ["openapi", "v3"]:
        if len(segments) == 2:
            return openapi.openapi_index(served)
        document = openapi.openapi_document("/".join(segments[2:]), cluster.version, served)
        if document is None:
            raise KubeError.path_not_found()
        return document
    if segments == ["api"]:
        return discovery.api_versions(f"{request.url.hostname}:{request.url.port}")
    if segments == ["apis"]:
        return discovery.api_group_list(served)
    if len(segments) == 2 and segments[0] == "api":
        found = discovery.api_resource_list("", segments[1], served)
        if found is None:
            raise KubeError.path_not_found()
        return found
    if len(segments) == 2 and segments[0] == "apis":
        group = discovery.api_group(segments[1], served)
        if group is None:
            raise KubeError.path_not_found()
        return group
    if len(segments) == 3 and segments[0] == "apis":
        listing = discovery.api_resource_list(segments[1], segments[2], served)
        if listing is None:
            raise KubeError.path_not_found()
        return listing
    return None


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return None
    content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
    if content_type == PROTOBUF:
        return decode_protobuf(raw)
    try:
        if content_type == APPLY:
            return _apply_body(raw)
        return json.loads(raw)
    except (ValueError, yaml.YAMLError) as exc:
        raise KubeError.bad_request(f"the request body could not be decoded: {exc}") from exc


def _apply_body(raw: bytes) -> Any:
    """An apply patch is YAML, which kubectl and lightkube send as JSON (a subset of YAML): read
    JSON with the json module, and only other YAML with the (much slower) YAML parser."""
    if raw.lstrip()[:1] == b"{":
        try:
            return json.loads(raw)
        except ValueError:
            pass
    return yaml.safe_load(raw)


def _manager(request: Request) -> str:
    """`?fieldManager=`, or what the real server derives from the User-Agent."""
    given = request.query_params.get("fieldManager")
    if given:
        return given
    agent = request.headers.get("user-agent", "unknown")
    return agent.split("/", 1)[0][:128]


def _delete_options(request: Request, body: Any) -> DeleteOptions:
    options = body if isinstance(body, dict) else {}
    preconditions = options.get("preconditions") or {}
    policy = options.get("propagationPolicy") or request.query_params.get("propagationPolicy") or "Background"
    if options.get("orphanDependents") is True or request.query_params.get("orphanDependents") == "true":
        policy = "Orphan"
    if policy not in ("Background", "Foreground", "Orphan"):
        raise KubeError.bad_request(f"propagationPolicy {policy!r} is not one of Background, Foreground, Orphan")
    return DeleteOptions(policy, preconditions.get("uid"), preconditions.get("resourceVersion"))


def _wants_table(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return any("as=Table" in part and "application/json" in part for part in accept.split(","))


async def _resource(cluster: KubeCluster, request: Request, target: Target) -> Response:
    ops = cluster.ops
    rt = target.resource
    namespace = target.namespace or ""
    method = request.method
    query = request.query_params
    if target.name is None:
        if method == "GET":
            items = ops.select(
                rt,
                target.namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
            )
            if query.get("watch") in ("true", "1"):
                return await cluster.watch(request, rt, target.namespace, items, query)
            revision = str(cluster.store.revision)
            if _wants_table(request):
                return _json(render_table(rt, items, cluster.clock.now(), revision))
            for item in items:
                item.pop("apiVersion", None)
                item.pop("kind", None)
            return _json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": revision},
                    "items": items,
                }
            )
        if method == "POST":
            body = await _body(request)
            if not isinstance(body, dict):
                raise KubeError.bad_request("the request body must be an object")
            if rt.namespaced and target.namespace is None:
                raise KubeError.path_not_found()
            return _json(_at(rt, ops.create(rt, namespace, body, manager=_manager(request))), 201)
        if method == "DELETE":
            body = await _body(request)
            deleted = ops.delete_collection(
                rt,
                target.namespace,
                label_selector=query.get("labelSelector"),
                field_selector=query.get("fieldSelector"),
                options=_delete_options(request, body),
            )
            return _json(
                {
                    "kind": rt.list_kind,
                    "apiVersion": rt.api_version,
                    "metadata": {"resourceVersion": str(cluster.store.revision)},
                    "items": deleted,
                }
            )
        raise KubeError.method_not_allowed(method)
    name = target.name
    if target.subresource == "eviction":
        if method != "POST":
            raise KubeError.method_not_allowed(method)
        body = await _body(request)
        options = _delete_options(request, body.get("deleteOptions") if isinstance(body, dict) else None)
        return _json(evict(cluster, namespace, name, body, options), 201)
    if target.subresource == "log":
        if method != "GET":
            raise KubeError.method_not_allowed(method)
        return Response(pod_log(cluster, namespace, name, query), media_type="text/plain")
    if target.subresource == "token":
        if method != "POST":
            raise KubeError.method_not_allowed(method)
        return _json(token_request(cluster, namespace, name, await _body(request)), 201)
    if method == "GET":
        obj = ops.get(rt, namespace, name)
        if _wants_table(request):
            return _json(render_table(rt, [obj], cluster.clock.now(), obj["metadata"]["resourceVersion"]))
        return _json(_at(rt, obj))
    if method == "PUT":
        body = await _body(request)
        if not isinstance(body, dict):
            raise KubeError.bad_request("the request body must be an object")
        updated = ops.update(rt, namespace, name, body, manager=_manager(request), subresource=target.subresource)
        return _json(_at(rt, updated))
    if method == "PATCH":
        body = await _body(request)
        content_type = request.headers.get("content-type", "").split(";")[0].strip()
        force = query.get("force") == "true"
        if force and content_type != APPLY:
            raise KubeError.bad_request("force may not be specified for non-apply patch")
        if content_type == APPLY:
            if target.subresource:
                raise KubeError.bad_request("apply to a subresource is not served by this emulator")
            obj, created = ops.apply(rt, namespace, name, body, manager=query.get("fieldManager", ""), force=force)
            return _json(_at(rt, obj), 201 if created else 200)
        patched = ops.patch(
            rt, namespace, name, body, content_type, manager=_manager(request), subresource=target.subresource
        )
        return _json(_at(rt, patched))
    if method == "DELETE":
        return _json(_at(rt, ops.delete(rt, namespace, name, _delete_options(request, await _body(request)))))
    raise KubeError.method_not_allowed(method)


def _at(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the version the request named shows it: a kind served at two versions
    (resources.py, OTHER_VERSIONS) is one stored object, whichever version wrote it last."""
    if obj.get("kind") == rt.kind:
        obj["apiVersion"] = rt.api_version
    return obj
