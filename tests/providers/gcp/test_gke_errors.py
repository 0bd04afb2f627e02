"""Google's errors become ComputeError, keeping Google's message: in isolation and through the emulator's faults."""

from __future__ import annotations

import pytest
import requests
from gke_world import Gke
from google.api_core import exceptions as gexc

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.provider import ClusterSpec, ClusterStatus, NodePoolSpec, NodePoolStatus
from better_compute.providers.gcp.errors import google_errors, to_compute_error


def raised(exc: BaseException) -> ComputeError:
    with pytest.raises(ComputeError) as caught, google_errors("doing it"):
        raise exc
    assert caught.value.__cause__ is exc
    return caught.value


@pytest.mark.parametrize(
    ("exc", "code", "reason"),
    [
        (gexc.NotFound("Not found: projects/p/locations/l/clusters/c."), ErrorCode.NOT_FOUND, None),
        (gexc.Conflict("Already exists: projects/p/locations/l/clusters/c."), ErrorCode.CONFLICT, None),
        (gexc.Forbidden("Insufficient regional quota to satisfy request"), ErrorCode.INVALID_STATE, "quota"),
        (gexc.Forbidden("The caller does not have permission"), ErrorCode.PERMISSION_DENIED, None),
        (gexc.Unauthorized("Request had invalid authentication credentials."), ErrorCode.PERMISSION_DENIED, None),
        (gexc.BadRequest("Cluster is running incompatible operation op-1."), ErrorCode.UNAVAILABLE, "busy"),
        (gexc.FailedPrecondition("Cluster c cannot be deleted"), ErrorCode.INVALID_STATE, None),
        (gexc.BadRequest('Invalid machine type "x1".'), ErrorCode.INVALID_INPUT, None),
        (gexc.ServiceUnavailable("try later"), ErrorCode.UNAVAILABLE, None),
        (gexc.TooManyRequests("Quota exceeded for quota metric"), ErrorCode.UNAVAILABLE, "throttled"),
    ],
)
def test_each_google_error_maps_to_a_code_and_keeps_its_message(
    exc: gexc.GoogleAPICallError, code: ErrorCode, reason: str | None
) -> None:
    error = raised(exc)
    assert error.code == code
    assert error.reason == reason
    assert error.message == f"doing it: {exc.message}"


def test_throttling_honours_retry_info() -> None:
    exc = gexc.TooManyRequests(
        "slow down", details=[{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "42s"}]
    )
    assert to_compute_error(exc, "x").retry_after == 42.0


def test_a_connection_failure_is_unavailable() -> None:
    assert raised(requests.ConnectionError("refused")).code == ErrorCode.UNAVAILABLE


async def test_throttled_requests_are_unavailable_with_retry_after_from_the_wire(gke: Gke) -> None:
    gke.emulator.faults.throttle = 1
    gke.emulator.faults.throttle_retry_after = 17
    with pytest.raises(ComputeError) as refused:
        await gke.driver.get_cluster(gke.account, "us-central1/any")
    assert refused.value.code == ErrorCode.UNAVAILABLE
    assert refused.value.retry_after == 17.0 and refused.value.reason == "throttled"
    assert "Mutating requests per minute" in refused.value.message
    assert await gke.driver.get_cluster(gke.account, "us-central1/any") is None


async def test_quota_exceeded_is_invalid_state_with_googles_message(gke: Gke) -> None:
    gke.emulator.faults.quota_exceeded = True
    with pytest.raises(ComputeError) as refused:
        await gke.driver.ensure_cluster(gke.account, ClusterSpec(name="q", location="us-central1"))
    assert refused.value.code == ErrorCode.INVALID_STATE and refused.value.reason == "quota"
    assert "Insufficient regional quota to satisfy request" in refused.value.message


async def ready(gke: Gke, name: str) -> str:
    state = await gke.driver.ensure_cluster(gke.account, ClusterSpec(name=name, location="us-central1-a"))
    await gke.advance(300)
    return state.cluster_id


async def test_a_stockout_fails_the_node_pool_and_the_next_ensure_reports_it_and_starts_over(gke: Gke) -> None:
    cluster_id = await ready(gke, "stock")
    gke.emulator.faults.stockout.add("a3-highgpu-8g")
    spec = NodePoolSpec(name="h100", machine_type="a3-highgpu-8g", node_count=1)
    await gke.driver.ensure_node_pool(gke.account, cluster_id, spec)
    await gke.advance(120)
    failed = await gke.driver.get_node_pool(gke.account, cluster_id, "h100")
    assert failed is not None and failed.status == NodePoolStatus.ERROR
    assert failed.message is not None and "ZONE_RESOURCE_POOL_EXHAUSTED" in failed.message
    failed_ops = [op for op in gke.emulator.operations.values() if op.error]
    assert [op.operation_type for op in failed_ops] == ["CREATE_NODE_POOL"]
    assert failed_ops[0].error is not None and failed_ops[0].error["code"] == 8

    with pytest.raises(ComputeError) as refused:
        await gke.driver.ensure_node_pool(gke.account, cluster_id, spec)
    assert refused.value.code == ErrorCode.UNAVAILABLE and refused.value.reason == "stockout"
    assert "does not have enough resources" in refused.value.message
    await gke.advance(60)
    assert await gke.driver.get_node_pool(gke.account, cluster_id, "h100") is None

    gke.emulator.faults.stockout.clear()
    await gke.driver.ensure_node_pool(gke.account, cluster_id, spec)
    await gke.advance(120)
    again = await gke.driver.get_node_pool(gke.account, cluster_id, "h100")
    assert again is not None and again.status == NodePoolStatus.READY


async def test_a_refused_delete_is_invalid_state_with_googles_message(gke: Gke) -> None:
    cluster_id = await ready(gke, "kept")
    gke.emulator.faults.refuse_delete = True
    with pytest.raises(ComputeError) as refused:
        await gke.driver.delete_cluster(gke.account, cluster_id)
    assert refused.value.code == ErrorCode.INVALID_STATE
    assert "protected by a deletion policy" in refused.value.message
    state = await gke.driver.get_cluster(gke.account, cluster_id)
    assert state is not None and state.status == ClusterStatus.READY


async def test_a_busy_cluster_is_unavailable_for_a_while(gke: Gke) -> None:
    cluster_id = await ready(gke, "busy")
    await gke.driver.upgrade_cluster(gke.account, cluster_id, "1.31")
    with pytest.raises(ComputeError) as refused:
        await gke.driver.upgrade_cluster(gke.account, cluster_id, "1.31")
    assert refused.value.code == ErrorCode.UNAVAILABLE and refused.value.reason == "busy"
    assert refused.value.retry_after == 30.0


async def test_a_control_plane_that_never_answers_stays_provisioning(gke: Gke) -> None:
    gke.emulator.faults.unresponsive = True
    state = await gke.driver.ensure_cluster(gke.account, ClusterSpec(name="silent", location="us-central1"))
    await gke.advance(3600)
    again = await gke.driver.get_cluster(gke.account, state.cluster_id)
    assert again is not None and again.status == ClusterStatus.PROVISIONING and again.outputs is None
    assert gke.emulator.kube_cluster("us-central1", "silent").unresponsive
    with pytest.raises(ComputeError) as refused:
        await gke.driver.credentials(gke.account, state.cluster_id)
    assert refused.value.code == ErrorCode.INVALID_STATE


async def test_credentials_for_a_missing_cluster_are_not_found(gke: Gke) -> None:
    with pytest.raises(ComputeError) as refused:
        await gke.driver.credentials(gke.account, "us-central1/gone")
    assert refused.value.code == ErrorCode.NOT_FOUND


async def test_a_spot_reclaim_removes_one_node(gke: Gke) -> None:
    cluster_id = await ready(gke, "spot")
    await gke.driver.ensure_node_pool(
        gke.account, cluster_id, NodePoolSpec(name="cheap", machine_type="e2-standard-4", node_count=2, spot=True)
    )
    await gke.advance(120)
    kube = gke.emulator.kube_cluster("us-central1-a", "spot")
    before = {n["metadata"]["name"] for n in kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "cheap"})}
    gone = await gke.emulator.reclaim_spot("us-central1-a", "spot", "cheap")
    after = {n["metadata"]["name"] for n in kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "cheap"})}
    assert before - after == {gone} and len(after) == 1


async def test_a_node_pool_being_resized_is_deleted_once_the_resize_is_done(gke: Gke) -> None:
    cluster_id = await ready(gke, "resizing")
    await gke.driver.ensure_node_pool(
        gke.account, cluster_id, NodePoolSpec(name="cpu", machine_type="e2-standard-4", node_count=1)
    )
    await gke.advance(120)
    await gke.driver.resize_node_pool(gke.account, cluster_id, "cpu", 3)
    with pytest.raises(ComputeError) as refused:
        await gke.driver.delete_node_pool(gke.account, cluster_id, "cpu")
    assert refused.value.code == ErrorCode.UNAVAILABLE and refused.value.reason == "busy"
    await gke.advance(60)
    await gke.driver.delete_node_pool(gke.account, cluster_id, "cpu")
    await gke.advance(60)
    assert await gke.driver.get_node_pool(gke.account, cluster_id, "cpu") is None
    kube = gke.emulator.kube_cluster("us-central1-a", "resizing")
    assert kube.objects("Node", labels={"cloud.google.com/gke-nodepool": "cpu"}) == []


async def test_a_refused_instance_group_read_is_permission_denied_naming_the_permission(gke: Gke) -> None:
    state = await gke.driver.ensure_cluster(gke.account, ClusterSpec(name="mig", location="us-central1-a"))
    await gke.advance(300)
    gke.emulator.faults.compute_denied = True
    with pytest.raises(ComputeError) as refused:
        await gke.driver.get_node_pool(gke.account, state.cluster_id, "bc-system")
    assert refused.value.code == ErrorCode.PERMISSION_DENIED
    assert "compute.instanceGroupManagers.get" in refused.value.message
    assert refused.value.message.startswith("reading node pool bc-system of us-central1-a/mig: ")
