"""AWS errors become ComputeError at the driver's edge, keeping AWS's message."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import ClusterSpec, NodePoolSpec, NodePoolStatus
from better_compute.providers.aws import EksKubernetes
from better_compute.providers.aws.errors import aws_errors, to_compute_error
from better_compute.testing.eks import EksEmulator, Timings
from better_compute.vps.provider import ProviderAccount


def client_error(code: str, message: str = "it went wrong", status: int = 400, **headers: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": headers},
        },
        "CreateNodegroup",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected", "reason"),
    [
        ("ResourceNotFoundException", 404, ErrorCode.NOT_FOUND, None),
        ("ResourceInUseException", 409, ErrorCode.CONFLICT, None),
        ("ResourceLimitExceededException", 400, ErrorCode.UNAVAILABLE, "quota"),
        ("InvalidParameterException", 400, ErrorCode.INVALID_INPUT, None),
        ("InvalidRequestException", 400, ErrorCode.INVALID_STATE, None),
        ("AccessDeniedException", 403, ErrorCode.PERMISSION_DENIED, None),
        ("ServerException", 500, ErrorCode.UNAVAILABLE, None),
        ("ServiceUnavailableException", 503, ErrorCode.UNAVAILABLE, None),
        ("SomethingNew", 400, ErrorCode.INVALID_STATE, None),
        ("SomethingNew", 502, ErrorCode.UNAVAILABLE, None),
    ],
)
def test_each_code_maps_and_keeps_the_message(code: str, status: int, expected: ErrorCode, reason: str | None) -> None:
    error = to_compute_error(client_error(code, "the provider says why", status), "CreateNodegroup")
    assert error.code is expected
    assert error.reason == reason
    assert "the provider says why" in error.message
    assert code in error.message


def test_throttling_is_unavailable_with_retry_after() -> None:
    with_header = to_compute_error(client_error("ThrottlingException", status=429, **{"retry-after": "12"}), "op")
    assert (with_header.code, with_header.retry_after, with_header.reason) == (ErrorCode.UNAVAILABLE, 12.0, "throttled")
    without = to_compute_error(client_error("RequestLimitExceeded", status=503), "op")
    assert without.code is ErrorCode.UNAVAILABLE and without.retry_after == 5.0


def test_no_sdk_exception_leaves_the_edge() -> None:
    with pytest.raises(ComputeError) as caught, aws_errors("DescribeCluster"):
        raise EndpointConnectionError(endpoint_url="https://eks.example")
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert isinstance(caught.value.__cause__, EndpointConnectionError)


async def test_faults_from_the_emulator_arrive_as_compute_errors(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    eks.faults.quota(clusters=0)
    with pytest.raises(ComputeError) as quota:
        await driver.ensure_cluster(account, ClusterSpec("q", "us-east-1"))
    assert (quota.value.code, quota.value.reason) == (ErrorCode.UNAVAILABLE, "quota")
    assert "Cluster limit exceeded" in quota.value.message
    eks.faults.clear()

    eks.faults.throttle(1, retry_after=9)
    with pytest.raises(ComputeError) as throttled:
        await driver.get_cluster(account, "us-east-1/q")
    assert (throttled.value.code, throttled.value.retry_after) == (ErrorCode.UNAVAILABLE, 9.0)
    assert await driver.get_cluster(account, "us-east-1/q") is None

    state = await driver.ensure_cluster(account, ClusterSpec("busy", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    await driver.ensure_node_pool(account, state.cluster_id, NodePoolSpec("np", "m7i.large", 1))
    with pytest.raises(ComputeError) as in_use:
        await driver.delete_cluster(account, state.cluster_id)
    assert in_use.value.code is ErrorCode.CONFLICT
    assert "nodegroups" in in_use.value.message

    eks.faults.refuse_delete("busy", message="User is not authorized to perform: eks:DeleteCluster")
    await driver.delete_node_pool(account, state.cluster_id, "np")
    clock.advance(Timings().nodegroup_delete)
    await eks.settle()
    with pytest.raises(ComputeError) as refused:
        await driver.delete_cluster(account, state.cluster_id)
    assert refused.value.code is ErrorCode.PERMISSION_DENIED
    assert "not authorized to perform: eks:DeleteCluster" in refused.value.message


async def test_a_stockout_is_a_node_pool_in_error_with_the_providers_reason(
    eks: EksEmulator, driver: EksKubernetes, account: ProviderAccount, clock: SimClock
) -> None:
    state = await driver.ensure_cluster(account, ClusterSpec("stock", "us-east-1"))
    clock.advance(Timings().cluster_create)
    await eks.settle()
    eks.faults.stockout("p5.48xlarge")
    await driver.ensure_node_pool(account, state.cluster_id, NodePoolSpec("h100", "p5.48xlarge", 1))
    clock.advance(Timings().nodegroup_create)
    await eks.settle()
    pool = await driver.get_node_pool(account, state.cluster_id, "h100")
    assert pool is not None and pool.status is NodePoolStatus.ERROR
    assert pool.message is not None and "InsufficientInstanceCapacity" in pool.message
