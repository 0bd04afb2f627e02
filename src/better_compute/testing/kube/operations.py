"""The verbs of the Kubernetes API, with the real server's rules.

HTTP handlers, the kubelet simulator and the controllers all write through here,
so every object gets the same bookkeeping: `uid`, `creationTimestamp`,
`resourceVersion` (optimistic concurrency on update), `generation` (bumped when
the spec changes), `managedFields` per manager, finalizers (a delete only marks
`deletionTimestamp` until they are gone), and status subresource isolation.
"""

from __future__ import annotations

import base64
import copy
import re
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from better_compute.core.clock import Clock
from better_compute.testing.kube.defaults import apply_defaults
from better_compute.testing.kube.managed import apply_configuration, record_update
from better_compute.testing.kube.patch import json_patch, merge_patch, strategic_merge_patch
from better_compute.testing.kube.podspec import pod_spec_errors
from better_compute.testing.kube.resources import RESOURCES, ResourceType
from better_compute.testing.kube.selectors import (
    match_fields,
    match_labels,
    parse_field_selector,
    parse_label_selector,
)
from better_compute.testing.kube.status import KubeError, success_status
from better_compute.testing.kube.store import ObjectStore, timestamp

__all__ = ["Admit", "DeleteOptions", "Operations"]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_NAMESPACE = next(r for r in RESOURCES if r.kind == "Namespace")
_UNDELETABLE_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class DeleteOptions:
    propagation: str = "Background"  # Background | Foreground | Orphan
    uid: str | None = None
    resource_version: str | None = None


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(length))


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


Admit = Callable[[ResourceType, str, dict[str, Any], str], None]
"""Admission of an object about to be created: (kind, namespace, object, the name a refusal shows)."""


class Operations:
    def __init__(self, store: ObjectStore, clock: Clock, admit: Admit | None = None) -> None:
        self.store = store
        self.clock = clock
        self.admit = admit

    def now(self) -> str:
        return timestamp(self.clock.now())

    # reads

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.store.get(rt, namespace, name)
        if obj is None:
            raise KubeError.not_found(rt, name)
        return obj

    def select(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        labels = parse_label_selector(label_selector) if label_selector else []
        fields = parse_field_selector(field_selector, rt) if field_selector else []
        return [  # select first, then copy only what is returned
            copy.deepcopy(obj)
            for obj in self.store.items(rt, namespace)
            if match_labels(labels, obj) and match_fields(fields, rt, obj)
        ]

    # writes

    def create(self, rt: ResourceType, namespace: str, obj: dict[str, Any], *, manager: str) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        self._check_type(rt, obj)
        meta = obj.setdefault("metadata", {})
        shown = str(meta.get("name") or meta.get("generateName") or "")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        name = meta.get("name") or ""
        self._check_namespace(rt, namespace, obj)
        if not name:
            raise KubeError.invalid(rt, name, [("metadata.name", "Required value: name or generateName is required")])
        if rt.group == "rbac.authorization.k8s.io":  # RBAC names are path segments: "system:basic-user"
            if name in (".", "..") or "/" in name or "%" in name:
                raise KubeError.invalid(
                    rt, name, [("metadata.name", f"Invalid value: \"{name}\": may not contain '/'")]
                )
        elif not _NAME.match(name) or len(name) > 253:
            raise KubeError.invalid(
                rt,
                name,
                [
                    (
                        "metadata.name",
                        f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                        "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
                    )
                ],
            )
        self._check_pod(rt, name, obj)
        if self.store.peek(rt, namespace, name) is not None:
            raise KubeError.already_exists(rt, name)
        for field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "managedFields"):
            meta.pop(field, None)
        self._prepare(rt, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        if rt.has_generation:
            meta["generation"] = 1
        apply_defaults(rt, obj)
        if self.admit is not None:
            self.admit(rt, namespace, obj, shown)
        record_update(None, obj, manager=manager, rt=rt, now=self.now())
        return self.store.write(rt, obj)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        obj: dict[str, Any],
        *,
        manager: str,
        subresource: str = "",
    ) -> dict[str, Any]:
        if subresource == "status":
            # A status write takes only `status` from the body (see _commit): copy just that
            # and the metadata that is checked here, not the whole object.
            obj = {**obj, "metadata": dict(obj.get("metadata") or {})}
            if "status" in obj:
                obj["status"] = copy.deepcopy(obj["status"])
        else:
            obj = copy.deepcopy(obj)
        self._check_type(rt, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise KubeError.bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        self._check_namespace(rt, namespace, obj, creating=False)
        live = self.store.peek(rt, namespace, name)  # read only: _commit never changes `live`
        if live is None:
            raise KubeError.not_found(rt, name)
        wanted = meta.get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise KubeError.stale(rt, name)
        return self._commit(rt, live, obj, manager=manager, subresource=subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        manager: str,
        subresource: str = "",
    ) -> dict[str, Any]:
        live = self.get(rt, namespace, name)
        if content_type == MERGE:
            patched = merge_patch(live, body)
        elif content_type == STRATEGIC:
            patched = strategic_merge_patch(live, body)
        elif content_type == JSON_PATCH:
            patched = json_patch(live, body)
        else:
            raise KubeError.unsupported_media(content_type)
        if not isinstance(patched, dict):
            raise KubeError.bad_request("the patch did not produce an object")
        wanted = patched.get("metadata", {}).get("resourceVersion")
        if wanted and wanted != live["metadata"]["resourceVersion"]:
            raise KubeError.stale(rt, name)
        patched.setdefault("metadata", {})["name"] = name
        return self._commit(rt, live, patched, manager=manager, subresource=subresource)

    def apply(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        config: Any,
        *,
        manager: str,
        force: bool,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply; returns the object and whether it was created."""
        if not isinstance(config, dict):
            raise KubeError.bad_request("an apply body is one object")
        if not manager:
            raise KubeError.bad_request("PATCH requests with apply-patch content type must specify a fieldManager")
        self._check_type(rt, config, required=True)
        meta = config.setdefault("metadata", {})
        if meta.get("name", name) != name:
            raise KubeError.bad_request("the name of the object does not match the name on the URL")
        meta["name"] = name
        self._check_namespace(rt, namespace, config, creating=False)
        live = self.store.peek(rt, namespace, name)  # read only: apply_configuration works on a copy
        wanted = meta.get("resourceVersion")
        if wanted and (live is None or wanted != live["metadata"]["resourceVersion"]):
            raise KubeError.stale(rt, name)
        merged = apply_configuration(live, config, manager=manager, force=force, rt=rt, now=self.now())
        if live is None:
            self._check_namespace(rt, namespace, merged)
            managed = merged["metadata"].pop("managedFields", None)
            created = self._create_applied(rt, namespace, merged, managed)
            return created, True
        return self._commit(rt, live, merged, manager=None, subresource=""), False

    def _create_applied(
        self, rt: ResourceType, namespace: str, obj: dict[str, Any], managed: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        meta = obj["metadata"]
        if rt.namespaced:
            meta["namespace"] = namespace
        self._check_pod(rt, str(meta.get("name", "")), obj)
        self._prepare(rt, obj)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self.now()
        if rt.has_generation:
            meta["generation"] = 1
        apply_defaults(rt, obj)
        if self.admit is not None:
            self.admit(rt, namespace, obj, str(meta.get("name", "")))
        if managed:
            meta["managedFields"] = managed
        return self.store.write(rt, obj)

    def delete(
        self, rt: ResourceType, namespace: str, name: str, options: DeleteOptions | None = None
    ) -> dict[str, Any]:
        """Delete now, or mark for deletion while finalizers remain. Returns the
        object when it lingers, otherwise a Success Status."""
        options = options or DeleteOptions()
        live = self.get(rt, namespace, name)
        if rt.kind == "Namespace" and name in _UNDELETABLE_NAMESPACES:
            raise KubeError.forbidden(f'namespaces "{name}" is forbidden: this namespace may not be deleted', rt, name)
        meta = live["metadata"]
        if options.uid and options.uid != meta["uid"]:
            raise KubeError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {options.uid}, UID in object meta: {meta['uid']}",
                {"name": name, "kind": rt.plural},
            )
        if options.resource_version and options.resource_version != meta["resourceVersion"]:
            raise KubeError.stale(rt, name)
        finalizers = list(meta.get("finalizers") or [])
        if options.propagation == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if options.propagation == "Orphan":
            self._orphan_dependents(meta["uid"])
        pending = bool(finalizers) or (rt.kind == "Namespace" and bool(live.get("spec", {}).get("finalizers")))
        if not pending:
            self.store.remove(rt, live)
            return success_status(rt, name, meta["uid"])
        if "deletionTimestamp" not in meta or finalizers != meta.get("finalizers"):
            first = "deletionTimestamp" not in meta
            meta.setdefault("deletionTimestamp", self.now())
            meta.setdefault("deletionGracePeriodSeconds", 0)
            meta["finalizers"] = finalizers
            if rt.kind == "Namespace":
                live.setdefault("status", {})["phase"] = "Terminating"
            if rt.has_generation and first:
                meta["generation"] = int(meta.get("generation", 1)) + 1
            self.store.write(rt, live)
        return live

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None,
        field_selector: str | None,
        options: DeleteOptions | None = None,
    ) -> list[dict[str, Any]]:
        deleted = []
        for obj in self.select(rt, namespace, label_selector=label_selector, field_selector=field_selector):
            meta = obj["metadata"]
            self.delete(rt, meta.get("namespace", ""), meta["name"], options)
            deleted.append(obj)
        return deleted

    def remove_finalizer(self, rt: ResourceType, obj: dict[str, Any], finalizer: str) -> None:
        """What a controller does when its cleanup is done."""
        live = self.store.get(rt, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if live is None:
            return
        meta = live["metadata"]
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != finalizer]
        self._commit(rt, self.get(rt, meta.get("namespace", ""), meta["name"]), live, manager=None, subresource="")

    # helpers

    def _commit(
        self,
        rt: ResourceType,
        live: dict[str, Any],
        new: dict[str, Any],
        *,
        manager: str | None,
        subresource: str,
    ) -> dict[str, Any]:
        """Write `new` over `live`, keeping what clients may not change. `live` may be the
        stored object itself: it is only read, and nothing of it ends up shared with `new`."""
        if subresource == "status":
            status = new.get("status")
            new = {key: None if key == "status" else copy.deepcopy(value) for key, value in live.items()}
            if status is None:
                new.pop("status", None)
            else:
                new["status"] = status
        elif "status" in rt.subresources:
            if "status" in live:
                new["status"] = copy.deepcopy(live["status"])
            else:
                new.pop("status", None)
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        meta = new.setdefault("metadata", {})
        old_meta = live["metadata"]
        for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "namespace"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        meta["name"] = old_meta["name"]
        if rt.kind == "Namespace" and subresource != "finalize":
            new["spec"] = copy.deepcopy(live.get("spec", {}))
        self._prepare(rt, new)
        if rt.has_generation:
            generation = int(old_meta.get("generation", 1))
            meta["generation"] = generation + 1 if _spec_of(live) != _spec_of(new) else generation
        if manager is not None:
            record_update(live, new, manager=manager, rt=rt, now=self.now(), subresource=subresource)
        if "deletionTimestamp" in meta and not meta.get("finalizers"):
            meta.pop("finalizers", None)
            if rt.kind != "Namespace" or not new.get("spec", {}).get("finalizers"):
                self.store.remove(rt, new)
                return new
        if meta.get("finalizers") == []:
            meta.pop("finalizers")
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == live:
            return new
        return self.store.write(rt, new)

    def finalize_namespace(self, name: str) -> None:
        """The namespace controller's last step: drop `spec.finalizers`, which removes it."""
        live = self.get(_NAMESPACE, "", name)
        new = copy.deepcopy(live)
        new["spec"]["finalizers"] = []
        self._commit(_NAMESPACE, live, new, manager=None, subresource="finalize")

    def _orphan_dependents(self, uid: str) -> None:
        for rt in RESOURCES:
            for obj in self.store.list(rt):
                refs = obj["metadata"].get("ownerReferences") or []
                if any(ref.get("uid") == uid for ref in refs):
                    kept = [ref for ref in refs if ref.get("uid") != uid]
                    if kept:
                        obj["metadata"]["ownerReferences"] = kept
                    else:
                        obj["metadata"].pop("ownerReferences")
                    self.store.write(rt, obj)

    def _prepare(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind
        if rt.kind == "Secret" and "stringData" in obj:
            data = obj.setdefault("data", {}) or {}
            for key, value in (obj.pop("stringData") or {}).items():
                data[key] = base64.b64encode(str(value).encode()).decode()
            obj["data"] = data

    @staticmethod
    def _check_pod(rt: ResourceType, name: str, obj: dict[str, Any]) -> None:
        if rt.kind == "Pod" and rt.group == "" and (causes := pod_spec_errors(obj.get("spec") or {})):
            raise KubeError.invalid(rt, name, causes)

    @staticmethod
    def _check_type(rt: ResourceType, obj: dict[str, Any], *, required: bool = False) -> None:
        kind = obj.get("kind")
        version = obj.get("apiVersion")
        if required and (not kind or not version):
            raise KubeError.bad_request("apiVersion and kind are required in an applied configuration")
        if (kind and kind != rt.kind) or (version and version != rt.api_version):
            raise KubeError.bad_request(
                f"the API version in the data ({version}) does not match the expected API version ({rt.api_version})"
                if version != rt.api_version
                else f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )

    def _check_namespace(self, rt: ResourceType, namespace: str, obj: dict[str, Any], *, creating: bool = True) -> None:
        meta = obj.setdefault("metadata", {})
        if not rt.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise KubeError.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = namespace
        if not creating:
            return
        ns = self.store.peek(_NAMESPACE, "", namespace)
        if ns is None:
            raise KubeError.not_found(_NAMESPACE, namespace)
        if "deletionTimestamp" in ns["metadata"]:
            raise KubeError.forbidden(
                f'{rt.plural} "{meta.get("name", "")}" is forbidden: unable to create new content in namespace '
                f"{namespace} because it is being terminated",
                rt,
                meta.get("name", ""),
            )
