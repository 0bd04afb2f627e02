"""`kubernetes(providers=..., substrate={"agent": ...})`: managed clusters and pool substrates.

    compute = better_compute(..., modules=[
        vps(providers=providers),
        kubernetes(providers=providers, substrate={"agent": kubernetes_substrate_agent(...)}),
        fleet_module(),
    ])
    await compute.kubernetes_substrates.get(tenant_id=..., pool_id=...)

It attaches `compute.kubernetes_clusters` and `compute.kubernetes_substrates`, registers
the clusters reconciler (`kubernetes.cluster`) and the substrate reconciler
(`kubernetes.substrate`, the work fleet queues), and registers the gateway's join hooks
(`gateway.joining.JoinHooks`): admission (a Spot Node's node is born spot), the first-session
hook (a node's first gateway session wakes its substrate, which counts it joined) and the
identity check (a substrate node joins only under the Node name its pod's ServiceAccount
token proves).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select

from better_compute.compute import list_nodes
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.findings import Finding
from better_compute.gateway.joining import JoinHooks
from better_compute.kubernetes.agent import SubstrateConfig, substrate_config
from better_compute.kubernetes.calls import CountedDriver
from better_compute.kubernetes.cluster_access.join_reviewer import JoinReviewers
from better_compute.kubernetes.clusters.reconciler import ClustersReconciler
from better_compute.kubernetes.clusters.service import KubernetesClusters
from better_compute.kubernetes.context import KubernetesContext
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.kubernetes.replacement import PER_HOUR, described, needing_reset
from better_compute.kubernetes.substrates.admission import admit_substrate_node, wake_on_first_session
from better_compute.kubernetes.substrates.node_identity import SubstrateNodeIdentity
from better_compute.kubernetes.substrates.reconciler import SubstratesReconciler, wake_waiting_for_agent
from better_compute.kubernetes.substrates.service import KubernetesSubstrates
from better_compute.kubernetes.substrates.substrate_rows import JOIN_WARNING
from better_compute.kubernetes.sweep.service import KubernetesSweep
from better_compute.kubernetes.tables import SubstrateRow
from better_compute.vps.module import ProviderAccounts, VpsModule
from better_compute.vps.provider import ProviderImpl

if TYPE_CHECKING:
    from fastapi import APIRouter

    from better_compute.core.module import ComputeLike
    from better_compute.engine import Reconciler

__all__ = ["KubernetesModule", "kubernetes"]


class KubernetesModule:
    name = "kubernetes"

    def __init__(self, providers: Sequence[ProviderImpl], substrate: SubstrateConfig) -> None:
        self.providers = {p.name: p for p in providers}
        self.substrate = substrate
        self._context: KubernetesContext | None = None
        self._mismatch: list[str] = []

    @property
    def context(self) -> KubernetesContext:
        if self._context is None:
            raise RuntimeError("the kubernetes module is not bound to a Compute yet")
        return self._context

    def bind(self, compute: ComputeLike) -> None:
        vps = compute.modules.get("vps")
        if isinstance(vps, VpsModule):
            self._mismatch = sorted(
                name
                for name in set(vps.providers) | set(self.providers)
                if vps.providers.get(name) is not self.providers.get(name)
            )
        drivers: dict[str, ProviderKubernetes] = {
            name: CountedDriver(p.kubernetes, name) for name, p in self.providers.items() if p.kubernetes is not None
        }
        self._context = KubernetesContext(
            db=compute.db,
            clock=compute.clock,
            feed=compute.feed,
            drivers=drivers,
            accounts=ProviderAccounts(compute.db, compute.clock, self.providers, compute.secrets),
            agent=self.substrate.agent,
            wake=compute.wake,
            reviewers=JoinReviewers(compute.clock),
        )
        compute.attach("kubernetes_clusters", KubernetesClusters(self._context))
        compute.attach("kubernetes_substrates", KubernetesSubstrates(compute.db, compute.clock))
        compute.attach("kubernetes_sweep", KubernetesSweep(self._context))
        if "gateway" not in compute.modules:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, "list gateway() before kubernetes(): nodes join through it", "/modules"
            )
        compute.gateway.register_hooks(
            JoinHooks(
                admission=admit_substrate_node,
                identity=SubstrateNodeIdentity(self._context),
                first_session=wake_on_first_session,
            )
        )

    async def start(self) -> None:
        """A server started with an agent wakes every substrate that waited for one. The deployment's
        mark is made here if the database has none yet, so every backup taken from now on holds it."""
        await self.context.deployment()
        if self.substrate.agent is not None:
            await wake_waiting_for_agent(self.context)

    def reconcilers(self) -> list[Reconciler]:
        return [ClustersReconciler(self.context), SubstratesReconciler(self.context)]

    def routers(self) -> list[APIRouter]:
        """None of its own: the API mounts `api.clusters` (views in `ops.clusters`) with this module."""
        return []

    def self_check(self) -> list[Finding]:
        findings = []
        if self.substrate.agent is None:
            findings.append(
                Finding(
                    "kubernetes.substrate-agent-missing",
                    "warning",
                    "kubernetes() has no substrate agent (image, gateway URL, pins, control plane URL): pools that "
                    "declare policy.substrate stay in error. Set BC_BCD_IMAGE, BC_GATEWAY_URL, BC_GATEWAY_PINS and "
                    'BC_CONTROL_PLANE_URL, or pass substrate={"agent": kubernetes_substrate_agent(...)}',
                )
            )
        if self._mismatch:
            findings.append(
                Finding(
                    "kubernetes.providers-differ",
                    "error",
                    f"vps() and kubernetes() were given different provider definitions for {', '.join(self._mismatch)}: "
                    "give both the same list",
                )
            )
        return findings

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        k = self.context
        cutoff = k.clock.now() - JOIN_WARNING
        live = select(SubstrateRow).where(SubstrateRow.state != "deleted")
        if tenant_id is not None:
            live = live.where(SubstrateRow.tenant_id == tenant_id)
        async with k.db.session() as session:
            rows = list(await session.scalars(live))
            members = {
                row.pool_id: await list_nodes(session, tenant_id=row.tenant_id, pool_id=row.pool_id) for row in rows
            }
        findings = []
        for row in rows:
            for node in members[row.pool_id]:
                failing = needing_reset(node.devices)
                if failing and node.state != "retired":
                    findings.append(
                        Finding(
                            "kubernetes.substrate-node-replacing",
                            "warning",
                            f"pool {row.pool_id}: Node {node.kubernetes_node_name or node.name} has {described(failing)} "
                            f"that need a reset: the substrate has it cordoned and replaces its machine once its "
                            f"bookings end (at most {PER_HOUR} machines of a pool an hour; the substrate's message "
                            "says what it waits for)",
                        )
                    )
                if node.competing_device_plugins:
                    findings.append(
                        Finding(
                            "kubernetes.substrate-competing-device-plugin",
                            "error",
                            f"pool {row.pool_id}: Node {node.kubernetes_node_name or node.name} has another device "
                            f"plugin for GPUs besides bcd ({', '.join(node.competing_device_plugins)} in "
                            "/var/lib/kubelet/device-plugins): the kubelet keeps the newest, so pods may get its GPUs "
                            "without a reservation, and the Node takes no new booking until it is gone; turn the "
                            "provider's plugin off or remove the other plugin",
                        )
                    )
            if row.waiting_since is not None and row.waiting_since <= cutoff and row.nodes_listed > row.nodes_joined:
                minutes = int((k.clock.now() - row.waiting_since) / timedelta(minutes=1))
                findings.append(
                    Finding(
                        "kubernetes.substrate-nodes-not-joining",
                        "warning",
                        f"pool {row.pool_id}: {row.nodes_listed - row.nodes_joined} Node(s) have not joined for "
                        f"{minutes} minutes; look at the pods of DaemonSet bc-system/bcd (image pull, gateway URL "
                        "and pins, GPU runtime class)",
                    )
                )
            if row.state == "deleting" and row.next_attempt_at is not None:
                findings.append(
                    Finding(
                        "kubernetes.substrate-teardown-retrying",
                        "warning",
                        f"pool {row.pool_id}: {row.message} (bcd or better-compute's access is still on the cluster "
                        "until this works)",
                    )
                )
            if row.state == "error":
                findings.append(Finding("kubernetes.substrate-error", "warning", f"pool {row.pool_id}: {row.message}"))
        return findings + await _orphans_found(KubernetesSweep(k), tenant_id)


async def _orphans_found(sweep: KubernetesSweep, tenant_id: str | None) -> list[Finding]:
    """The accounts whose last sweep found things of ours that no record owns."""
    findings = []
    for row in await sweep.last(tenant_id):
        if row.orphans:
            ids = ", ".join(str(o["id"]) for o in row.orphans)
            findings.append(
                Finding(
                    "kubernetes.orphans-found",
                    "warning",
                    f"provider account {row.account}: the sweep of {row.swept_at.isoformat()} found {len(row.orphans)} "
                    f"thing(s) carrying better-compute's marks that no record owns ({ids}), perhaps left by a "
                    f"database restored from an older backup; they run and bill until removed: look with "
                    f"`better-compute sweep --account {row.account}`, remove them with `--delete`",
                )
            )
    return findings


def kubernetes(
    *, providers: Sequence[ProviderImpl] = (), substrate: SubstrateConfig | Mapping[str, object] | None = None
) -> KubernetesModule:
    """The kubernetes module for `better_compute(modules=[...])`; give it the same providers as vps(),
    and `substrate={"agent": kubernetes_substrate_agent(...)}` (or a SubstrateConfig) to run bcd."""
    return KubernetesModule(providers, substrate_config(substrate))
