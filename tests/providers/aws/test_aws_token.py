"""The EKS cluster token: its format, and that the cluster's API server accepts it,
and refuses it tampered, for another cluster, or older than 15 minutes."""

from __future__ import annotations

import base64
from dataclasses import replace
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from lightkube import ApiError
from lightkube.resources.core_v1 import Node

from better_compute.core.clock import SimClock
from better_compute.core.redaction import redact
from better_compute.kubernetes.cluster_access.kube_api import kube_client
from better_compute.kubernetes.provider import ClusterCredentials, ClusterSpec, ClusterStatus
from better_compute.providers.aws import EksKubernetes
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount


async def _ready(driver: EksKubernetes, account: ProviderAccount, clock: SimClock, eks: EksEmulator) -> str:
    state = await driver.ensure_cluster(account, ClusterSpec("tok", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    ready = await driver.get_cluster(account, state.cluster_id)
    assert ready is not None and ready.status == ClusterStatus.READY
    return state.cluster_id


def _url(token: str) -> str:
    raw = token.removeprefix("k8s-aws-v1.")
    return base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()


async def _status(credentials: ClusterCredentials) -> int:
    client = kube_client(credentials)
    try:
        [node async for node in client.list(Node)]
    except ApiError as exc:
        return int(exc.status.code or 0)
    finally:
        await client.close()
    return 200


async def test_the_token_is_a_presigned_sts_url_with_the_cluster_name_signed(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id = await _ready(driver, account, clock, eks)
    creds = await driver.credentials(account, cluster_id)
    assert creds.token.startswith("k8s-aws-v1.")
    assert "=" not in creds.token, "the base64 padding is stripped"
    url = urlsplit(_url(creds.token))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert f"{url.scheme}://{url.netloc}" == eks.url
    assert query["Action"] == "GetCallerIdentity"
    assert query["Version"] == "2011-06-15"
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    assert query["X-Amz-Date"] == clock.now().strftime("%Y%m%dT%H%M%SZ"), "signed at the injected clock's time"
    assert query["X-Amz-Credential"].startswith(f"{eks.access_key_id}/")
    assert (creds.expires_at - clock.now()).total_seconds() == 600
    assert creds.token not in repr(creds)
    assert creds.token not in redact(f"token {creds.token}")
    async with httpx.AsyncClient() as http:
        identity = await http.get(_url(creds.token), headers={"x-k8s-aws-id": "tok"})
        assert identity.status_code == 200, "the presigned URL is a real STS GetCallerIdentity"
        assert eks.principal_arn in identity.text
        wrong = await http.get(_url(creds.token), headers={"x-k8s-aws-id": "other"})
        assert wrong.status_code == 403


async def test_the_api_server_accepts_the_token_and_refuses_it_tampered_or_for_another_cluster(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id = await _ready(driver, account, clock, eks)
    creds = await driver.credentials(account, cluster_id)
    assert await _status(creds) == 200
    assert eks.issued == [creds.token]
    assert eks.accepts(creds)
    url = _url(creds.token).replace("X-Amz-Expires=60", "X-Amz-Expires=900")
    tampered = "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    assert await _status(replace(creds, token=tampered)) == 401
    assert await _status(replace(creds, token=creds.token[:-4] + "AAAA")) == 401
    other = await driver.ensure_cluster(account, ClusterSpec("other", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    other_creds = await driver.credentials(account, other.cluster_id)
    assert await _status(replace(other_creds, token=creds.token)) == 401, "a token names its cluster"
    assert not eks.accepts(replace(other_creds, token=creds.token))
    assert eks.issued == [creds.token]


async def test_sts_honours_the_token_15_minutes(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    cluster_id = await _ready(driver, account, clock, eks)
    creds = await driver.credentials(account, cluster_id)
    clock.advance(15 * 60 - 1)
    assert await _status(creds) == 200, "a 60 s presign is honoured 15 minutes"
    clock.advance(2)
    assert await _status(creds) == 401
    assert not eks.accepts(creds)


async def test_credentials_of_a_cluster_not_yet_active_are_refused(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount
) -> None:
    from better_compute.core.errors import ComputeError, ErrorCode

    state = await driver.ensure_cluster(account, ClusterSpec("young", "us-east-1"))
    with pytest.raises(ComputeError) as caught:
        await driver.credentials(account, state.cluster_id)
    assert caught.value.code is ErrorCode.INVALID_STATE
