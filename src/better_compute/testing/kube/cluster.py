"""`KubeCluster`: one emulated cluster's state, credentials and controllers.

It owns the object store, the token authority, the kubelet simulator and the
controllers that a real control plane runs (garbage collector, namespace
finalizer, DaemonSet controller). `settle()` runs those controllers until
nothing changes; the HTTP layer and the kubelet call it after every write, so
tests see a consistent cluster without waiting on background loops.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from better_compute.core.clock import Clock
from better_compute.testing.kube.admission import CRITICAL_PRIORITY_CLASSES, Admission
from better_compute.testing.kube.auth import Authenticator, TokenAuthority, TokenReview
from better_compute.testing.kube.bootstrap import CLUSTER_ROLE_BINDINGS, CLUSTER_ROLES
from better_compute.testing.kube.controllers import Dirty, run_controllers
from better_compute.testing.kube.daemonsets import Placements
from better_compute.testing.kube.kubelet import KubeletSimulator
from better_compute.testing.kube.operations import Operations
from better_compute.testing.kube.rbac import Attributes, Authorizer, authorize
from better_compute.testing.kube.resources import RESOURCES, ResourceType, find_kind, served_by
from better_compute.testing.kube.satokens import API_AUDIENCE, ServiceAccountTokens
from better_compute.testing.kube.status import KubeError
from better_compute.testing.kube.store import ObjectStore
from better_compute.testing.kube.watch import watch_response

if TYPE_CHECKING:
    from better_compute.testing.kube.server import KubeApiServer

__all__ = ["KubeCluster"]

_SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_SETTLE_ROUNDS = 50
_KUBELET_KINDS = frozenset({"Node", "Pod:lifecycle", "Secret", "ConfigMap", "ServiceAccount"})


class KubeCluster:
    def __init__(self, server: KubeApiServer, cluster_id: str, version: str, clock: Clock) -> None:
        self.id = cluster_id
        self.version = version
        self.enabled_apis: set[str] = set()
        """Opt-in beta APIs turned on, by `group/version/plural` (GKE's `enableK8sBetaApis`); resources.py."""
        self.clock = clock
        self._server = server
        self.store = ObjectStore()
        self.admission = Admission(self.store)
        """How this API server admits pods (Pod Security default, limited quota scopes): a provider sets it."""
        self.ops = Operations(self.store, clock, self.admission.admit)
        self.tokens = TokenAuthority(clock)
        self.sa_tokens = ServiceAccountTokens(clock, self.store)
        self._authorizers: list[Authorizer] = []
        self.kubelet = KubeletSimulator(self)
        self._responsive = asyncio.Event()
        self._responsive.set()
        self._failing: list[tuple[str, str, str, int]] = []
        self._failing_always: list[tuple[str, str, str, int]] = []
        self._settling = False
        self._dirty = Dirty()
        self.placements = Placements()
        self.store.subscribe(self._dirty.note)
        namespaces = self.resource("v1", "Namespace")
        for name in _SYSTEM_NAMESPACES:
            self.ops.create(namespaces, "", {"metadata": {"name": name}}, manager="kube-apiserver")
        self._bootstrap_rbac()
        classes = self.resource("scheduling.k8s.io/v1", "PriorityClass")
        for name, value, description in CRITICAL_PRIORITY_CLASSES:
            body = {
                "metadata": {"name": name},
                "value": value,
                "description": description,
                "preemptionPolicy": "PreemptLowerPriority",
            }
            self.ops.create(classes, "", body, manager="kube-apiserver")
        self.settle()

    def _bootstrap_rbac(self) -> None:
        marks = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"}}
        annotations = {"rbac.authorization.kubernetes.io/autoupdate": "true"}
        for kind, objects in (("ClusterRole", CLUSTER_ROLES), ("ClusterRoleBinding", CLUSTER_ROLE_BINDINGS)):
            rt = self.resource("rbac.authorization.k8s.io/v1", kind)
            for obj in objects:
                meta = obj["metadata"]
                body = {**obj, "metadata": {**meta, "labels": {**meta.get("labels", {}), **marks["labels"]}}}
                body["metadata"]["annotations"] = annotations
                self.ops.create(rt, "", body, manager="kube-apiserver")

    # addressing and credentials

    @property
    def endpoint(self) -> str:
        return f"{self._server.url}/clusters/{self.id}"

    @property
    def ca_data(self) -> str:
        """Base64 of the CA PEM: what a kubeconfig's certificate-authority-data holds."""
        return base64.b64encode(self._server.ca_pem).decode()

    def issue_token(self, subject: str, ttl_seconds: float, groups: tuple[str, ...] = ("system:masters",)) -> str:
        token, _ = self.tokens.issue(subject, ttl_seconds, tuple(groups))
        return token

    def add_authenticator(self, fn: Authenticator) -> None:
        self.tokens.add_authenticator(fn)

    def review_token(self, token: str, audiences: list[str]) -> tuple[TokenReview, list[str]] | None:
        """Who `token` is and which of `audiences` (the API server's own when empty) it is valid for.

        Service-account JWTs carry their audiences; the opaque tokens (issue_token,
        provider authenticators) are valid for the API server's audience only."""
        wanted = audiences or [API_AUDIENCE]
        if token.count(".") == 2:
            found = self.sa_tokens.review(token, wanted)
            if found is not None:
                return found
        review = self.tokens.review(token)
        if review is None or API_AUDIENCE not in wanted:
            return None
        return review, [API_AUDIENCE]

    def authenticate(self, authorization: str) -> TokenReview | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        found = self.review_token(token.strip(), [API_AUDIENCE])
        return found[0] if found is not None else None

    def add_authorizer(self, fn: Authorizer) -> None:
        """A webhook authorizer after RBAC, as a provider runs one (GKE IAM, EKS access policies):
        `fn(user, attributes)` answers the reason it allows the request, or None."""
        self._authorizers.append(fn)

    def authorize(self, user: TokenReview, attributes: Attributes) -> str | None:
        """Why `user` may do this (RBAC first, then each registered authorizer), or None when nothing allows it."""
        reason = authorize(self.store, user, attributes)
        for authorizer in self._authorizers:
            if reason is not None:
                break
            reason = authorizer(user, attributes)
        return reason

    # faults

    @property
    def unresponsive(self) -> bool:
        """While True, requests hang (clients time out), like a control plane that never answers."""
        return not self._responsive.is_set()

    @unresponsive.setter
    def unresponsive(self, value: bool) -> None:
        if value:
            self._responsive.clear()
        else:
            self._responsive.set()

    def fail_next(self, verb: str, resource: str, name: str = "", *, code: int = 500) -> None:
        """The next `verb` on `resource` (named `name`, or any) is answered `code` and changes
        nothing, as an API server does when etcd times out or it is overloaded."""
        self._failing.append((verb, resource, name, code))

    def fail_until_cleared(self, verb: str, resource: str, subresource: str = "", *, code: int = 500) -> None:
        """Every `verb` on `resource` (its `subresource`: "token" is a TokenRequest) is answered `code`
        and changes nothing until `clear_failures()`, as when etcd keeps timing out."""
        self._failing_always.append((verb, resource, subresource, code))

    def clear_failures(self) -> None:
        self._failing.clear()
        self._failing_always.clear()

    def take_failure(self, attributes: Attributes) -> KubeError | None:
        """The failure injected for this request, if one is due (each of `fail_next` is answered once)."""
        for verb, resource, subresource, code in self._failing_always:
            if (verb, resource, subresource) == (attributes.verb, attributes.resource, attributes.subresource):
                reason = "ServiceUnavailable" if code == 503 else "InternalError"
                return KubeError(code, reason, "etcdserver: request timed out")
        for fault in self._failing:
            verb, resource, name, code = fault
            if (verb, resource) == (attributes.verb, attributes.resource) and name in ("", attributes.name):
                self._failing.remove(fault)
                reason = "ServiceUnavailable" if code == 503 else "InternalError"
                return KubeError(code, reason, "etcdserver: request timed out")
        return None

    async def wait_responsive(self) -> bool:
        """Wait while the fault lasts; False when the server stops meanwhile."""
        if self._responsive.is_set():
            return True
        waiter = asyncio.ensure_future(self._responsive.wait())
        stopper = asyncio.ensure_future(self._server.stopping.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stopper.cancel()
        return self._responsive.is_set()

    def served(self) -> tuple[ResourceType, ...]:
        """The kinds this API server serves: its version's, with the beta APIs it turned on (resources.py)."""
        return served_by(self.version, self.enabled_apis)

    # inspection helpers for tests

    def resource(self, api_version: str, kind: str) -> ResourceType:
        found = find_kind(api_version, kind)
        if found is None:
            raise KeyError(f"{api_version} {kind} is not served by the emulator")
        return found

    def objects(
        self,
        kind: str,
        namespace: str | None = None,
        *,
        api_version: str | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every stored object of `kind` (e.g. "Pod"), optionally in one namespace and with these labels."""
        rt = self._by_kind(kind, api_version)
        return [
            copy.deepcopy(obj)
            for obj in self.store.items(rt, namespace)
            if all((obj["metadata"].get("labels") or {}).get(k) == v for k, v in (labels or {}).items())
        ]

    def get_object(
        self, kind: str, name: str, namespace: str = "", *, api_version: str | None = None
    ) -> dict[str, Any] | None:
        return self.store.get(self._by_kind(kind, api_version), namespace, name)

    def _by_kind(self, kind: str, api_version: str | None) -> ResourceType:
        matches = [r for r in RESOURCES if r.kind == kind and (api_version is None or r.api_version == api_version)]
        if not matches:
            raise KeyError(f"{kind} is not served by the emulator")
        return matches[0]

    # control loop

    def settle(self, *, everything: bool = True) -> None:
        """Run the controllers until the cluster stops changing.

        `everything=False` runs only the controllers that the changes since the last
        settle concern (what the API and the kubelet do after each write); the
        default runs them all once first (after a fault is cleared, say).
        """
        if self._settling:
            return
        self._settling = True
        try:
            dirty = Dirty.all() if everything else self._dirty.take()
            for _ in range(_SETTLE_ROUNDS):
                if dirty.empty:
                    break
                run_controllers(self, dirty)
                if dirty.kinds & _KUBELET_KINDS:
                    self.kubelet.sync()
                dirty = self._dirty.take()
        finally:
            self._settling = False

    async def watch(
        self,
        request: Request,
        rt: ResourceType,
        namespace: str | None,
        current: list[dict[str, Any]],
        query: Mapping[str, str],
    ) -> Response:
        return watch_response(self.store, rt, namespace, current, query, self._server.stopping)

    def subscribe(self, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Be told of every change (a `store.Change`), in order."""
        return self.store.subscribe(callback)

    async def close(self) -> None:
        await self.kubelet.close()
