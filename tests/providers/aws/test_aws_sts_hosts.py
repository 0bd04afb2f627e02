"""A stock client's EKS token names the real STS host it signed for; the emulated cluster accepts it, as EKS does.

The token is made the way the AWS CLI's `eks get-token` makes it (boto3's STS client, `x-k8s-aws-id` added before
signing), with no endpoint override: botocore signs for `sts.<region>.amazonaws.com` with the wall clock. So this
test's simulated clock starts at the wall time, and the 15 minutes are then counted on it exactly.
"""

from __future__ import annotations

import base64
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from better_compute.core.clock import SimClock
from better_compute.kubernetes.provider import ClusterCredentials, ClusterSpec
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount


@pytest.fixture
def clock() -> SimClock:
    return SimClock(datetime.now(UTC))


def stock_token(eks: EksEmulator, cluster: str, *, region: str, endpoint_url: str | None = None) -> str:
    sts = boto3.client(  # type: ignore[call-overload]
        "sts",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id=eks.access_key_id,
        aws_secret_access_key=eks.secret_access_key,
    )

    def add_cluster_id(request: Any, **_: Any) -> None:
        request.headers["x-k8s-aws-id"] = cluster

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_cluster_id)
    url = sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=60, HttpMethod="GET")
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def host_of(token: str) -> str:
    raw = token.removeprefix("k8s-aws-v1.")
    return urlsplit(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()).netloc


async def credentials(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> ClusterCredentials:
    state = await driver.ensure_cluster(account, ClusterSpec("stock", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    return await driver.credentials(account, state.cluster_id)


async def test_a_stock_clients_token_for_the_regional_or_global_sts_host_is_accepted_for_15_minutes(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    ours = await credentials(eks, driver, account, clock)
    regional = stock_token(eks, "stock", region="us-east-1")
    assert host_of(regional) == "sts.us-east-1.amazonaws.com"
    glob = stock_token(eks, "stock", region="us-east-1", endpoint_url="https://sts.amazonaws.com")
    assert host_of(glob) == "sts.amazonaws.com"
    for token in (regional, glob):
        assert eks.accepts(replace(ours, token=token)), host_of(token)
    assert not eks.accepts(replace(ours, token=stock_token(eks, "other", region="us-east-1"))), "names its cluster"

    clock.advance(16 * 60)
    assert not eks.accepts(replace(ours, token=regional)), "older than 15 minutes on the clock"


async def test_a_token_for_a_host_sts_is_not_or_scoped_to_another_region_is_refused(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    ours = await credentials(eks, driver, account, clock)
    refused = {
        "another region's scope": stock_token(
            eks, "stock", region="eu-west-1", endpoint_url="https://sts.us-east-1.amazonaws.com"
        ),
        "global host, not us-east-1": stock_token(
            eks, "stock", region="eu-west-1", endpoint_url="https://sts.amazonaws.com"
        ),
        "not STS": stock_token(eks, "stock", region="us-east-1", endpoint_url="https://sts.example.com"),
        "plain http": stock_token(eks, "stock", region="us-east-1", endpoint_url="http://sts.us-east-1.amazonaws.com"),
    }
    for why, token in refused.items():
        assert not eks.accepts(replace(ours, token=token)), why
    assert eks.accepts(replace(ours, token=stock_token(eks, "stock", region="eu-west-1")))
