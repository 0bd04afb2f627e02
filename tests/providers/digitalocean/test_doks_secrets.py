"""The DigitalOcean API token (a canary here) and minted cluster tokens never reach a log, an error or a repr."""

from __future__ import annotations

import logging

import pytest
from doks_world import CANARY, REFERENCE, World

from better_compute.core.errors import ComputeError
from better_compute.core.redaction import install_redaction
from better_compute.kubernetes.provider import ClusterSpec, NodePoolSpec


async def test_the_token_is_resolved_per_call_and_never_shown(world: World, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    install_redaction(logging.getLogger())
    logging.getLogger("azure").setLevel(logging.DEBUG)
    account = world.account()
    seen: list[str] = []

    state = await world.driver.ensure_cluster(account, ClusterSpec("canary", "tor1"))
    await world.advance(world.doks.timings.cluster_provisioning)
    credentials = await world.driver.credentials(account, state.cluster_id)
    world.doks.faults.throttle(1)
    world.doks.faults.stockout("c-8")
    for call in (
        world.driver.get_cluster(account, state.cluster_id),
        world.driver.ensure_node_pool(account, state.cluster_id, NodePoolSpec("x", "c-8", 1)),
        world.driver.read_adoptable(account, "not-a-uuid"),
    ):
        with pytest.raises(ComputeError) as caught:
            await call
        seen += [str(caught.value), repr(caught.value), str(caught.value.to_dict()), str(caught.value.__cause__)]
    # a careless log line elsewhere: both values were registered for redaction when the driver met them
    logging.getLogger("test").info("leak %s %s %s", credentials, CANARY, credentials.token)

    assert world.resolved and set(world.resolved) == {REFERENCE}
    seen += [repr(world.provider), repr(account), repr(credentials), str(account.config), caplog.text]
    for text in seen:
        assert CANARY not in text
        assert credentials.token not in text
    assert "Authorization" in caplog.text, "azure-core logged the request headers, which this test must see"
