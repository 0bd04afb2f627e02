"""The story the demo tells, one step at a time, through the public services a user reaches.

Each step is an async function of the `Story` (the world, the display and the summary it
fills in); `STEPS` lists them in order with their headings. A step that follows the
world live uses `Story.follow`, which steps simulated time until a check holds.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.demo.adopt import Adopted, adopt, left_in_adopted
from better_compute.demo.display import Display, SubstrateRow
from better_compute.demo.summary import PoolResult, Summary
from better_compute.demo.world import DemoWorld
from better_compute.testing import KubeCluster

__all__ = ["KEEP_STEP", "STEPS", "Step", "Story"]

SIM_LIMIT = timedelta(hours=3)
"""A step that has not reached its goal in this much simulated time has failed (the demo says where)."""

SCALED_POOL = "doks-h100"
SPOT_POOL = "gke-h100"
FAILING_POOL = "doks-h100"
EMPTY = {"version": 1, "sites": [], "providerAccounts": [], "pools": []}


def demo_failed(message: str) -> ComputeError:
    """A step did not reach its goal: one line saying which, and what the substrates showed."""
    return ComputeError(ErrorCode.INVALID_STATE, f"the demo did not reach its goal: {message}")


@dataclass
class Story:
    world: DemoWorld
    display: Display
    summary: Summary
    document: dict[str, Any] = field(default_factory=dict)
    """The document last applied: its pools are the rows followed (the world's fleet until the adopt step)."""
    adopted: Adopted | None = None

    def __post_init__(self) -> None:
        self.document = self.document or self.world.document

    @property
    def tenant(self) -> str:
        return self.world.tenant_id

    async def substrate_rows(self) -> list[SubstrateRow]:
        rows: list[SubstrateRow] = []
        for name in self.world.pool_names(self.document):
            provider = self.world.provider_of(name, self.document)
            try:
                view = await self.world.compute.kubernetes_substrates.get(tenant_id=self.tenant, pool_id=name)
            except ComputeError:
                rows.append((name, provider, "gone", "", 0, 0, "the pool is archived"))
                continue
            cluster = view.cluster.status if view.cluster else ""
            listed, joined = len(view.nodes_listed), len(view.nodes_joined)
            rows.append((name, provider, view.state, cluster, listed, joined, view.message or ""))
            self.summary.nodes_joined.update(f"{name}/{n}" for n in view.nodes_joined)
            if view.cluster is not None and view.mode != "adopt":
                self.summary.clusters_created.add(view.cluster.id)
        return rows

    async def follow(self, waiting_for: str, check: Callable[[], Awaitable[bool]], *, show: bool = True) -> None:
        """Step simulated time, redrawing the substrate table (unless not `show`), until `check()` holds."""
        deadline = self.world.cloud.clock.now() + SIM_LIMIT
        with (self.display if show else Display(None)).live() as live:
            while True:
                done = await check()  # before the rows, so that the last rows shown are the ones that hold
                rows = await self.substrate_rows()
                live.update(
                    rows, simulated=self.world.sim_elapsed, wall=self.world.wall_elapsed, waiting_for=waiting_for
                )
                if done:
                    return
                if self.world.cloud.clock.now() > deadline:
                    raise demo_failed(f"not reached within {SIM_LIMIT} of simulated time: {waiting_for}; {rows}")
                await self.world.step()

    async def all_ready(self) -> bool:
        """Every pool's substrate is ready and every Node it lists has joined."""
        ready = True
        for name in self.world.pool_names():
            view = await self.world.compute.kubernetes_substrates.get(tenant_id=self.tenant, pool_id=name)
            done = view.state == "ready" and bool(view.nodes_listed) and view.nodes_listed == view.nodes_joined
            result = self.summary.pools.setdefault(name, PoolResult(self.world.provider_of(name)))
            if done and not result.ready:
                result.ready = True
                result.ready_after_seconds = self.world.sim_elapsed.total_seconds()
                result.nodes_joined = len(view.nodes_joined)
            ready = ready and done
        return ready

    async def apply(self, document: dict[str, Any], name: str, *, prune: bool = False) -> None:
        """Show the plan as `fleet plan` does for the document called `name`, then apply it."""
        fleet = self.world.compute.fleet
        self.display.plan(await fleet.plan(document, tenant_id=self.tenant, prune=prune), name)
        applied = await fleet.apply(document, tenant_id=self.tenant, prune=prune)
        counts = applied.counts()
        self.display.note(
            f"Applied: {counts['create']} created, {counts['update']} updated, {counts['delete']} deleted.", "bold"
        )

    def kube_cluster_of(self, node_name: str) -> KubeCluster:
        for cluster in self.world.cloud.kube.clusters.values():
            if node_name in cluster.kubelet.node_names:
                return cluster
        raise demo_failed(f"no emulated cluster has a Node {node_name}")

    async def advertised_when_booked(self, reservation_id: str) -> dict[str, Any]:
        """Wait until the node's device plugin advertises exactly the reservation's GPUs; what it advertises."""
        compute = self.world.compute
        reservation = await compute.reservations.get(self.tenant, reservation_id)
        node = await compute.nodes.get(self.tenant, reservation.node_id)
        held = sorted(d.uuid for d in node.devices if d.id in reservation.device_ids)
        node_name = node.kubernetes_node_name or ""
        kube = self.kube_cluster_of(node_name)

        async def advertised() -> bool:
            return kube.kubelet.advertised(node_name) == held

        await self.follow(f"bcd's device plugin on {node_name} to advertise the booked GPUs", advertised, show=False)
        return {
            "reservation": reservation.id,
            "node": node_name,
            "spot": node.spot,
            "gpus": len(held),
            "advertised": kube.kubelet.advertised(node_name),
        }

    def scaled_document(self, nodes: int) -> dict[str, Any]:
        document = copy.deepcopy(self.world.document)
        pool = next(p for p in document["pools"] if p["name"] == SCALED_POOL)
        pool["policy"]["substrate"]["flavors"][0]["nodes"] = nodes
        return document

    async def joined_count(self, pool: str, count: int) -> bool:
        view = await self.world.compute.kubernetes_substrates.get(tenant_id=self.tenant, pool_id=pool)
        return view.state == "ready" and view.nodes_listed == view.nodes_joined and len(view.nodes_joined) == count


def short_gpus(uuids: list[str]) -> str:
    """`8 (GPU-1a2b3c…)`: how many, and enough of one to see they are the node's, within the table's width."""
    return f"{len(uuids)} ({uuids[0][:10]}…)" if uuids else "none"


async def plan_and_apply(story: Story) -> None:
    await story.apply(story.world.document, "fleet.json")


async def follow_until_ready(story: Story) -> None:
    await story.follow("every pool ready, every Node joined", story.all_ready)


async def book(story: Story) -> None:
    compute = story.world.compute
    rows = []
    for name in story.world.pool_names():
        pool = await compute.pools.get_by_name(story.tenant, name)
        reservation = await compute.reservations.create(story.tenant, pool.id, 8)
        seen = await story.advertised_when_booked(reservation.id)
        story.summary.reservations.append({"pool": name, **seen})
        rows.append((name, seen["reservation"], seen["node"], short_gpus(seen["advertised"])))
    story.display.table(
        "bcd's device plugin advertises exactly the booked GPUs", ["pool", "reservation", "node", "GPUs"], rows
    )
    for booked in story.summary.reservations:
        await compute.reservations.release(story.tenant, booked["reservation"])
    story.display.note("Released the three reservations: their GPUs go back to their pools.")


async def scale(story: Story) -> None:
    for nodes in (2, 1):
        story.display.note(f"{SCALED_POOL}: flavor h100 to {nodes} node{'s' if nodes > 1 else ''}", "bold")
        await story.apply(story.scaled_document(nodes), f"fleet-{SCALED_POOL}-{nodes}.json")

        async def reached(nodes: int = nodes) -> bool:
            return await story.joined_count(SCALED_POOL, nodes)

        await story.follow(f"{SCALED_POOL} at {nodes} joined Node{'s' if nodes > 1 else ''}", reached)
        story.summary.scaled.append(
            {"pool": SCALED_POOL, "nodes": nodes, "atSeconds": round(story.world.sim_elapsed.total_seconds())}
        )


async def spot_reclaim(story: Story) -> None:
    compute, world = story.world.compute, story.world
    pool = await compute.pools.get_by_name(story.tenant, SPOT_POOL)
    preemptible = await compute.reservations.create(story.tenant, pool.id, 8, spot=True)
    seen = await story.advertised_when_booked(preemptible.id)
    story.display.note(f"Booked {seen['reservation']} (spot) on {seen['node']}; now Google reclaims that VM.")
    (cluster,) = [c for c in await compute.kubernetes_clusters.list(tenant_id=story.tenant) if c.provider == "gcp"]
    spot_pool = next(p for p in cluster.node_pools if p.spot)
    gone = await world.cloud.gke.reclaim_spot(cluster.location, cluster.name, spot_pool.name)

    async def preempted() -> bool:
        return (await compute.reservations.get(story.tenant, preemptible.id)).state == "preempted"

    await story.follow(f"{preemptible.id} to be preempted", preempted)
    story.summary.preemptions.append({"pool": SPOT_POOL, "reservation": preemptible.id, "node": gone})
    story.display.table(
        "A Spot reclaim preempts the Spot reservation",
        ["pool", "reservation", "reclaimed Node", "state"],
        [(SPOT_POOL, preemptible.id, gone, "preempted")],
    )


async def gpu_failure(story: Story) -> None:
    compute = story.world.compute
    pool = await compute.pools.get_by_name(story.tenant, FAILING_POOL)
    booking = await compute.reservations.create(story.tenant, pool.id, 8)
    seen = await story.advertised_when_booked(booking.id)
    node = await compute.nodes.get(story.tenant, booking.node_id)
    name, gpu = seen["node"], node.devices[3]
    story.display.note(f"Booked {booking.id} on {name}; now GPU {gpu.index} ({gpu.uuid[:10]}…) falls off the bus.")
    story.kube_cluster_of(name).kubelet.gpu_fault(name, gpu.index, xid=79, lost=True)

    async def degraded() -> bool:
        return (await compute.reservations.get(story.tenant, booking.id)).health == "degraded"

    await story.follow(f"GPU {gpu.index} of {name} off sale and {booking.id} degraded", degraded)
    story.display.note(
        f"{booking.id} keeps its other 7 GPUs; {name} is cordoned and waits for it to end. The tenant releases it."
    )
    await compute.reservations.release(story.tenant, booking.id)

    async def replaced() -> bool:
        gone = (await compute.nodes.get(story.tenant, node.id)).state == "retired"
        return gone and await story.joined_count(FAILING_POOL, 1)

    await story.follow(f"{name}'s machine replaced at the provider and its new Node joined", replaced)
    (new,) = [n for n in await compute.nodes.list(story.tenant, pool_id=pool.id) if n.state != "retired"]
    story.summary.replacements.append(
        {
            "pool": FAILING_POOL,
            "reservation": booking.id,
            "gpu": gpu.uuid,
            "reason": "gpu-lost",
            "node": name,
            "newNode": new.kubernetes_node_name,
        }
    )
    story.display.table(
        "A lost GPU: quarantined, its reservation degraded, its machine replaced once the booking ended",
        ["pool", "GPU", "reservation", "old Node", "new Node"],
        [(FAILING_POOL, f"{gpu.index} (gpu-lost)", f"{booking.id} degraded", name, new.kubernetes_node_name or "")],
    )


async def prune(story: Story) -> None:
    compute, cloud = story.world.compute, story.world.cloud
    kube = compute.module("kubernetes").context  # type: ignore[attr-defined]
    made = [
        (cluster, *await kube.account(story.tenant, cluster.account))
        for cluster in await compute.kubernetes_clusters.list(tenant_id=story.tenant)
    ]
    await story.apply(EMPTY, "empty.json", prune=True)

    async def archived() -> bool:
        return await compute.pools.list(story.tenant) == []

    await story.follow("every pool archived, every cluster torn down", archived)
    story.display.note("The pools are gone; pruning again takes their sites and provider accounts too.")
    await story.apply(EMPTY, "empty.json", prune=True)
    left: dict[str, int] = {}
    rows = []
    owners_kube = 0
    for cluster, account, driver in made:
        if cluster.mode == "adopt" and story.adopted is not None:
            kept = await left_in_adopted(story, story.adopted, account, driver)
            story.summary.adopted = {**(story.summary.adopted or {}), "afterPrune": kept}
            left["adoptedOursLeft"] = len(kept["oursLeft"])
            owners_kube += kept["clusterKept"]
            there = "still there" if kept["clusterKept"] else "GONE"
            pool = "their node pool as it was" if kept["ownerPoolsKept"] else "their node pool CHANGED"
            answer = f"the owner's: {there}, {pool}"
            rows.append((cluster.provider, cluster.name, f"{answer}; ours left: {len(kept['oursLeft'])}"))
            continue
        found = await driver.get_cluster(account, cluster.provider_cluster_id or "")
        left[cluster.provider] = left.get(cluster.provider, 0) + (found is not None)
        rows.append(
            (cluster.provider, cluster.name, "still there" if found else "gone: the provider answers not found")
        )
    left["kubernetes-api"] = len(cloud.kube.clusters) - owners_kube
    left["nodes"] = len(await compute.nodes.list(story.tenant))
    active = [r for r in await compute.reservations.list(story.tenant) if r.state == "active"]
    left["activeReservations"] = len(active)
    story.summary.left_after_prune = left
    rows.append(("kubernetes API", f"{left['kubernetes-api']} clusters of ours", "served by the emulator"))
    rows.append(("better-compute", f"{left['nodes']} nodes, {len(active)} reservations", "in the database"))
    story.display.table("What is left after the prune", ["where", "what", "answer"], rows)


async def keep_up(story: Story) -> None:
    """With --keep: the fleet comes back up, for `substrates get`, `fleet plan` and the API to look at."""
    await story.apply(story.world.document, "fleet.json")
    await story.follow("every pool ready, every Node joined", story.all_ready)


Step = tuple[str, str, str, Callable[[Story], Awaitable[None]]]
"""(number, title, what it shows, the step)."""

STEPS: tuple[Step, ...] = (
    (
        "1",
        "Plan and apply examples/fleet.json",
        "One GPU pool on each provider: GKE (with a Spot flavor), EKS and DOKS. The plan is shown as "
        "`better-compute fleet plan` shows it, then applied in one transaction.",
        plan_and_apply,
    ),
    (
        "2",
        "Clusters provision, bcd is applied, Nodes join",
        "The control plane creates each cluster at its provider, applies bcd's DaemonSet, and each Node's "
        "bcd joins over pinned TLS. Simulated time runs much faster than real time.",
        follow_until_ready,
    ),
    (
        "3",
        "Book GPUs",
        "One 8-GPU reservation per pool; bcd's device plugin on the chosen node then advertises exactly "
        "those GPUs to the kubelet.",
        book,
    ),
    (
        "4",
        "Scale a flavor up and down",
        f"{SCALED_POOL}'s flavor goes to 2 nodes, then back to 1: the node pool is resized in place and the "
        "Node that goes is retired.",
        scale,
    ),
    (
        "5",
        "A Spot reclaim preempts a Spot reservation",
        f"A spot reservation lands on {SPOT_POOL}'s Spot node; the provider takes the VM back and the "
        "reservation is preempted.",
        spot_reclaim,
    ),
    (
        "6",
        "Adopt a cluster someone else runs",
        "A GKE cluster with its owner's node pool already exists; one more pool adopts it. better-compute "
        "adds a node pool of its own and bcd, and leaves the owner's node pool alone.",
        adopt,
    ),
    (
        "7",
        "A GPU fails: quarantined, then its machine replaced",
        f"One GPU of a booked {FAILING_POOL} Node falls off the bus (XID 79): it leaves the market at once and the "
        "reservation is degraded; once it is released, the substrate asks DigitalOcean for a new machine in its "
        "place, and the new Node joins.",
        gpu_failure,
    ),
    (
        "8",
        "Prune",
        "An empty document applied with --prune: every pool is archived and everything better-compute made "
        "at the providers is torn down. Then each provider is asked for each cluster; the adopted one is "
        "the owner's and stays, with nothing of ours left in it.",
        prune,
    ),
)
"""The story in order."""

KEEP_STEP: Step = (
    "9",
    "Keep the world up",
    "--keep: the fleet is applied again so that there is something to look at.",
    keep_up,
)
