"""`ProviderImpl.aclose()`: the one shutdown hook of a provider definition closes its
capability drivers (their thread pools and SDK sessions), off the event loop, and is
harmless to call again."""

from __future__ import annotations

import threading
from typing import cast

import pytest

from better_compute.core.clock import SimClock
from better_compute.kubernetes.provider import ProviderKubernetes
from better_compute.testing.cloud import Cloud
from better_compute.vps.provider import ProviderAccount, ProviderImpl, SupportsClose

EKS_CONFIG = {
    "region": "us-east-1",
    "zones": ["us-east-1a", "us-east-1b"],
    "eksClusterRoleArn": "arn:aws:iam::111111111111:role/eks-cluster",
    "eksNodeRoleArn": "arn:aws:iam::111111111111:role/eks-node",
    "eksSubnetIds": ["subnet-0000000000000000a", "subnet-0000000000000000b"],
}


class ClosingDriver:
    """Records the thread each close() ran on."""

    def __init__(self) -> None:
        self.closed_on: list[threading.Thread] = []

    def close(self) -> None:
        self.closed_on.append(threading.current_thread())


class DriverWithoutClose:
    """Holds nothing, so has no close()."""


async def test_aclose_closes_the_kubernetes_driver_off_the_event_loop_thread() -> None:
    driver = ClosingDriver()
    provider = ProviderImpl("stub", kubernetes=cast(ProviderKubernetes, driver))
    await provider.aclose()
    assert len(driver.closed_on) == 1
    assert driver.closed_on[0] is not threading.current_thread(), "a blocking close() must not stall the loop"
    await provider.aclose()
    assert len(driver.closed_on) == 2, "aclose forwards every call; the driver makes the second one harmless"


async def test_a_definition_without_a_closable_driver_closes_as_a_no_op() -> None:
    assert not isinstance(DriverWithoutClose(), SupportsClose)
    await ProviderImpl("nothing").aclose()
    await ProviderImpl("stub", kubernetes=cast(ProviderKubernetes, DriverWithoutClose())).aclose()


PLACES: dict[str, tuple[dict[str, object], str]] = {
    "gcp": ({"projectId": "my-project", "zones": ["us-central1-a"]}, "us-central1/none"),
    "aws": (EKS_CONFIG, "us-east-1/none"),
    "digitalocean": ({"token": "secret://tenant_1/doks", "regions": ["tor1"]}, "00000000-0000-0000-0000-000000000000"),
}
"""A config and a cluster id that does not exist, per provider: enough for one get_cluster call."""


async def test_aclose_shuts_each_real_drivers_thread_pool_and_twice_is_harmless(clock: SimClock) -> None:
    async with Cloud(clock) as cloud:

        async def resolve(reference: str) -> str:
            return cloud.doks_token

        providers = cloud.providers(max_workers=1)
        assert [p.name for p in providers] == ["gcp", "aws", "digitalocean"]
        for provider in providers:
            driver = provider.kubernetes
            assert isinstance(driver, SupportsClose) and driver is not None
            config, cluster_id = PLACES[provider.name]
            account = ProviderAccount("a", provider.name, "tenant_1", config, resolve_secret=resolve)
            assert await driver.get_cluster(account, cluster_id) is None  # the pool works before

            await provider.aclose()
            with pytest.raises(RuntimeError, match="after shutdown"):
                await driver.get_cluster(account, cluster_id)
            await provider.aclose()


async def test_cloud_stop_closes_the_providers_it_handed_out(clock: SimClock) -> None:
    cloud = Cloud(clock)
    await cloud.start()
    try:
        providers = cloud.providers(max_workers=1)
    finally:
        await cloud.stop()

    async def resolve(reference: str) -> str:
        return cloud.doks_token

    for provider in providers:
        assert provider.kubernetes is not None
        config, cluster_id = PLACES[provider.name]
        account = ProviderAccount("a", provider.name, "tenant_1", config, resolve_secret=resolve)
        with pytest.raises(RuntimeError, match="after shutdown"):
            await provider.kubernetes.get_cluster(account, cluster_id)


async def test_closing_the_compute_closes_every_provider_of_the_vps_module(tmp_path: object) -> None:
    from better_compute.server import better_compute
    from better_compute.vps.module import vps

    drivers = [ClosingDriver(), ClosingDriver()]
    providers = [
        ProviderImpl(name, kubernetes=cast(ProviderKubernetes, d)) for name, d in zip(("a", "b"), drivers, strict=True)
    ]
    compute = better_compute(
        database=f"sqlite:///{tmp_path}/c.db", secret="s" * 40, modules=[vps(providers=providers)], clock=SimClock()
    )
    await compute.migrate()
    await compute.start()
    assert [len(d.closed_on) for d in drivers] == [0, 0]
    await compute.close()
    assert [len(d.closed_on) for d in drivers] == [1, 1]
