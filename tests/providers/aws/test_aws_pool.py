"""Every blocking boto3 call runs in the driver's own bounded pool, never on the event loop."""

from __future__ import annotations

import threading
from typing import Any

from better_compute.core.clock import SimClock
from better_compute.kubernetes.provider import ClusterSpec, NodePoolSpec
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount


async def test_sdk_calls_run_on_the_drivers_threads(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    threads: list[str] = []

    def record(**_: Any) -> None:
        threads.append(threading.current_thread().name)

    for service in ("eks", "ec2", "sts"):
        client = await driver._aws.call("client", service, "us-east-1", lambda c: c)
        client.meta.events.register("before-send", record)
    state = await driver.ensure_cluster(account, ClusterSpec("threads", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    await driver.ensure_node_pool(account, state.cluster_id, NodePoolSpec("gpu", "g6.xlarge", 1))
    await driver.credentials(account, state.cluster_id)
    assert len(threads) >= 6
    assert all(name.startswith("bc-aws") for name in threads), threads
    assert driver._aws._executor._max_workers == 4
