"""Two replicas on one PostgreSQL; one is killed in the middle of a run, the other finishes the work.

Both replicas' engines take work from the same queue in turns. The first one to ask the
provider for the cluster dies right after the call (a BaseException the engine does not
catch: its lease stays held, its connections are dropped). The survivor takes the item
over once the lease runs out and brings the pool to `ready` with every Node joined, and
nothing that must be done once was done twice: one cluster at the provider, one
redemption of a join token per Node, one node record per Node.
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from contextlib import nullcontext
from datetime import timedelta

import pytest
from e2e_world import EXAMPLES, SECRET
from sqlalchemy import func, select

from better_compute.gateway.tables import JoinTokenRow
from better_compute.kubernetes.calls import Call, watch_calls
from better_compute.kubernetes.tables import SubstrateRow
from better_compute.server import Compute
from better_compute.store import Database
from better_compute.testing import Cloud


class Killed(BaseException):
    """The replica's process died."""


@pytest.fixture
async def cloud() -> AsyncIterator[Cloud]:
    async with Cloud() as started:
        yield started


def replica(url: str, cloud: Cloud) -> Compute:
    return cloud.compute(url, SECRET, lease_seconds=60)


@pytest.mark.parametrize("database_url", ["postgres"], indirect=True)  # replicas share one PostgreSQL
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # a killed process leaves connections
async def test_the_survivor_finishes_and_nothing_is_done_twice(database: Database, cloud: Cloud) -> None:
    doomed, survivor = replica(database.url, cloud), replica(database.url, cloud)
    live = [doomed, survivor]

    async def killed_at_create(call: Call) -> None:
        if call.method == "ensure_cluster":
            raise Killed("right after asking the provider for the cluster")

    try:
        tenant = await survivor.iam.create_tenant("acme")
        reference = await survivor.secrets.create(tenant.id, cloud.doks_token)
        document = (EXAMPLES / "fleet-doks.json").read_text().replace("secret://<tenant>/<id>", reference)
        cloud.serve(survivor)  # the survivor serves the API and the node gateway
        await survivor.fleet.apply(json.loads(document), tenant_id=tenant.id)
        pool = await survivor.pools.get_by_name(tenant.id, "gpu-fleet")
        deadline = cloud.clock.now() + timedelta(minutes=60)
        while True:
            async with survivor.db.session() as session:
                row = await session.get(SubstrateRow, pool.id)
            if row is not None and row.state == "ready" and row.nodes_joined == row.nodes_listed == 2:
                break
            assert cloud.clock.now() < deadline, f"not converged: {row and (row.state, row.message)}"
            for compute in list(live):  # in turns, the doomed one first: it takes what is due
                try:
                    # only the doomed replica's runs are watched: it dies at its create
                    with watch_calls(killed_at_create) if compute is doomed else nullcontext():
                        await compute.run_until_idle()
                except Killed:
                    live.remove(compute)
                    await compute.close()
            cloud.clock.advance(5)
            await cloud.settle()
        assert live == [survivor], "the doomed replica died mid-run and the survivor finished"

        assert len(cloud.doks.clusters) == 1, "one cluster at the provider"
        async with survivor.db.session() as session:
            redeemed = await session.scalar(select(func.sum(JoinTokenRow.uses)).where(JoinTokenRow.pool_id == pool.id))
        assert redeemed == 2, "one join token redemption per Node"
        nodes = await survivor.nodes.list(tenant.id, pool_id=pool.id)
        assert len({n.kubernetes_node_name for n in nodes}) == len(nodes) == 2, "one node record per Node"
    finally:
        for compute in live:
            await compute.close()
        gc.collect()  # the killed replica's dropped connections are reclaimed here, not in a later test
