"""Joining a node to its pool, and recognising it afterwards by its node credential.

One transaction takes a use of the token, registers the node (compute's `register_node` is
idempotent on pool and name, so the same Node joining twice gets the same pool node back) and
issues a fresh node credential, which replaces any earlier one. A node whose identity the pool
proved, joining again under a credential the same token gave it (its first answer lost on the
way), takes no further use: a use is a node, not a request. A session still open on the old
credential is closed in the same transaction, and the replica holding its socket closes that
too (see gateway.sessions). The node's name is its Kubernetes Node name when bcd reports one,
else its hostname.

A node's name is only what it claims, and anyone holding the pool's join token could claim
another's. So a module that manages the pool's machines may set an identity check (the
kubernetes substrate has the cluster verify the pod's ServiceAccount token, whose bound
claims name the Node): it runs before the join's transaction, and a join it did not
verify can never take over a node that is joined and connected under that name.

A pool node is one machine. The check's proof names the machine where it can (a Kubernetes
Node's uid), and the node is bound to the first one proven; a join under the node's name
from another machine (a Node re-created under its name, a VM recreated with a fresh disk),
or whose GPUs share no UUID with the node's, ends the old node's reservations (`preempted`
on Spot, quota refunded once) and retires it, and joins as a new node.

A module that manages the pool's machines (the kubernetes substrate) may set an admission
hook: it runs in the join's transaction and gives the system labels a new node is born
with (a Spot Node's `bc.dev/capacity=spot`), so the node is never bookable as something
it is not, not even for a moment. The same module may set a first-session hook: it runs
in the transaction that opens a node's first gateway session (the substrate wakes itself
there, to count the node joined). The three come together as one `JoinHooks`, which that
module registers on the Gateway once (`Gateway.register_hooks`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from better_compute.compute.models import Node
from better_compute.compute.nodes import find_live_node, node_row, register_node, retire
from better_compute.compute.reservations import end_reservations_on_node
from better_compute.compute.tables import NodeRow
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_token
from better_compute.core.redaction import redact_value
from better_compute.decisions import Decision, Kind, record
from better_compute.gateway.hashing import digest
from better_compute.gateway.sessions import CREDENTIAL_REPLACED, close_open_session, is_connected
from better_compute.gateway.tables import NodeCredentialRow
from better_compute.gateway.tokens import JoinToken, redeem_join_token, rejoining_token, token_decision
from better_compute.wire.protocol import Inventory

__all__ = [
    "FirstSession",
    "JoinAdmission",
    "JoinHooks",
    "Joined",
    "NodeIdentityCheck",
    "Proof",
    "authenticate_node",
    "join_node",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Proof:
    """A joining node proved its name; `machine` is the machine behind it when the proof names one."""

    machine: str | None = None


@dataclass(frozen=True, slots=True)
class Joined:
    node: Node
    token: JoinToken
    credential: str

    def __repr__(self) -> str:
        return f"Joined(node={self.node.id!r}, token={self.token.id!r}, credential=[REDACTED])"


class JoinAdmission(Protocol):
    """Decides, inside the join's transaction, the system labels a joining node is born with."""

    def __call__(
        self, session: AsyncSession, *, pool_id: str, node_name: str, now: datetime
    ) -> Awaitable[dict[str, str]]: ...


class FirstSession(Protocol):
    """Inside the transaction that opens a joined node's first gateway session (its hello accepted)."""

    def __call__(self, session: AsyncSession, *, pool_id: str, node_name: str, now: datetime) -> Awaitable[None]: ...


class NodeIdentityCheck(Protocol):
    """Before the join's transaction: whether the joining node proved it is `node_name`.

    A Proof: proven. None: this pool does not verify identities. Raises PERMISSION_DENIED when
    the pool requires proof and it is missing or names another node, UNAVAILABLE when the
    proof cannot be checked now (the node retries)."""

    def __call__(self, *, pool_id: str, node_name: str, identity_token: str | None) -> Awaitable[Proof | None]: ...


@dataclass(frozen=True)
class JoinHooks:
    """What the module that manages the pools' machines adds to joins and sessions (none: a plain join)."""

    admission: JoinAdmission | None = None
    identity: NodeIdentityCheck | None = None
    first_session: FirstSession | None = None

    def __bool__(self) -> bool:
        return any(hook is not None for hook in (self.admission, self.identity, self.first_session))


def _another_machine(node: Node, machine: str | None, inventory: Inventory) -> bool:
    """Whether a join under `node`'s name comes from another machine than the one the node is."""
    if machine is not None and node.machine_id is not None and machine != node.machine_id:
        return True
    had = {d.uuid for d in node.devices}
    has = {g.uuid for g in inventory.gpus}
    return bool(had) and bool(has) and had.isdisjoint(has)


async def join_node(
    session: AsyncSession,
    *,
    now: datetime,
    token: str,
    inventory: Inventory,
    admission: JoinAdmission | None = None,
    proof: Proof | None = None,
) -> Joined:
    """Redeem one use of `token` and register the node; the credential is returned once.

    Without a `proof`, a node joined and connected under the same name is refused: a second
    join would replace its credential and take its assignments. With it, a node that this
    token already let in joins again without taking a further use. A live node of the name
    that is another machine is retired first (its reservations ended), and the join is a new node."""
    rejoining = await rejoining_token(session, value=token, node_name=inventory.node_name) if proof else None
    taken = rejoining or await redeem_join_token(session, now=now, value=token)
    redact_value(token)  # only once it proved real: a stranger's guesses must not grow the redaction set
    existing = await find_live_node(session, pool_id=taken.pool_id, name=inventory.node_name)
    if existing is not None and _another_machine(existing, proof.machine if proof else None, inventory):
        log.info(
            "pool %s: node %s is now another machine; its node %s is retired",
            existing.pool_id,
            existing.name,
            existing.id,
        )
        why = f"node {existing.name} joined again from another machine"
        await end_reservations_on_node(session, now=now, node_id=existing.id, reason=why)
        await record(session, now, Decision(Kind.REPLACED, existing.tenant_id, why, pool_id=existing.pool_id,
                                            node_id=existing.id, node_name=existing.name))  # fmt: skip
        await retire(session, existing.id, now, reason=f"{why}: it is replaced")
        existing = None
    if proof is None and existing is not None and await is_connected(session, existing.id):
        raise ComputeError(
            ErrorCode.PERMISSION_DENIED,
            f"node {inventory.node_name!r} is joined and connected: joining again under its name needs "
            "proof of the node's identity",
            "/inventory/os",
        )
    labels = (
        {}
        if admission is None
        else await admission(session, pool_id=taken.pool_id, node_name=inventory.node_name, now=now)
    )
    node = await register_node(
        session,
        now=now,
        pool_id=taken.pool_id,
        name=inventory.node_name,
        inventory=inventory.model_dump(mode="json", by_alias=True, exclude_none=True),
        system_labels=labels,
        machine_id=proof.machine if proof else None,
    )
    if rejoining is None and taken.uses_left == 0:
        why = f"its last use joined node {node.name} ({taken.uses} of {taken.uses_allowed} joins)"
        await record(session, now, token_decision(Kind.TOKEN_USED_UP, taken, why, node_id=node.id, node_name=node.name))
    credential = new_token("bcn")
    redact_value(credential)
    row = await session.get(NodeCredentialRow, node.id, with_for_update=True)
    if row is None:
        session.add(
            NodeCredentialRow(
                node_id=node.id,
                tenant_id=node.tenant_id,
                pool_id=node.pool_id,
                credential_hash=digest(credential),
                token_id=taken.id,
                created_at=now,
            )
        )
    else:
        row.credential_hash, row.token_id, row.created_at = digest(credential), taken.id, now
        await close_open_session(session, node_id=node.id, now=now, reason=CREDENTIAL_REPLACED)
    await session.flush()
    return Joined(node=node, token=taken, credential=credential)


async def authenticate_node(session: AsyncSession, credential: str) -> NodeRow:
    """The node this credential belongs to; PERMISSION_DENIED if unknown, replaced, or the node is retired.

    Its row, not a `Node`: a session's hello needs no devices, and reading them cost a statement a connection.
    """
    row = await session.scalar(select(NodeCredentialRow).where(NodeCredentialRow.credential_hash == digest(credential)))
    if row is None:
        raise ComputeError(ErrorCode.PERMISSION_DENIED, "node credential not recognised (replaced or never issued)")
    node = await node_row(session, row.node_id)
    if node.state == "retired":
        raise ComputeError(ErrorCode.PERMISSION_DENIED, f"node {node.name!r} is retired")
    return node
