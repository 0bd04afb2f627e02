"""This deployment's mark: a random id made once per database, on everything better-compute makes.

Two deployments of better-compute (staging and production, each on its own database) may share one
provider account. Each cluster and node pool a deployment makes carries `better-compute.dev/deployment=<id>`
next to its substrate-pool mark, so that the orphan sweep of one never takes what the other made.
The id is not a secret. It lives in the database (`kubernetes_deployment`, one row): every replica on
that database reads the same one, a restart keeps it, and a database restored from a backup keeps it,
which is the case the sweep exists for. The first replica that needs it makes it; one that loses that
race reads the winner's.
"""

from __future__ import annotations

import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from better_compute.core.clock import Clock
from better_compute.kubernetes.tables import DeploymentRow
from better_compute.store import Database

__all__ = ["deployment_id"]

ID_BYTES = 8
"""16 lower-case hex characters: valid as a Kubernetes label value, a GKE resource label value,
an EKS tag value and inside a DigitalOcean tag, with no rewriting anywhere."""


async def _read(db: Database) -> str | None:
    async with db.read() as session:
        found: str | None = await session.scalar(select(DeploymentRow.id).where(DeploymentRow.singleton == 1))
        return found


async def deployment_id(db: Database, clock: Clock) -> str:
    """The database's deployment id, made now if it has none yet."""
    found = await _read(db)
    if found is not None:
        return found
    try:
        async with db.transaction() as session:
            session.add(DeploymentRow(singleton=1, id=secrets.token_hex(ID_BYTES), created_at=clock.now()))
    except IntegrityError:
        pass  # another replica made it first: its id is the deployment's
    made = await _read(db)
    if made is None:
        raise RuntimeError("the deployment id was written and is not there")
    return made
