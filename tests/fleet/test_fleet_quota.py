"""The plan's quota checks: what each account and place is asked for (growth only, autoscaled flavors at their
upper bound), and how an exceeded or unreadable quota reads in the text."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from fleet_documents import SUBSTRATE, TENANT, applied, edit, example
from fleet_stub import StubKubernetes, stub_providers
from rich.console import Console

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.fleet.cost import flavor_changes
from better_compute.fleet.plan import endings, make_plan
from better_compute.fleet.quota import check_quotas
from better_compute.fleet.render import render_plan
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import Snapshot
from better_compute.kubernetes.provider import Accelerators, Quota
from better_compute.vps.provider import ProviderAccount

FLAVOR = f"{SUBSTRATE}/flavors/0"
H100 = Quota("NVIDIA_H100_GPUS", "NVIDIA H100 GPUs", "GPUs", limit=24, usage=8, adds=0, scope="us-central1")


def one_zone(provider: str, config: Any, zones: tuple[str, ...]) -> int:
    return 1


async def checks(document: dict[str, Any], state: Snapshot, answer: Any = (H100,)) -> tuple[Any, StubKubernetes]:
    providers = stub_providers()
    kube = providers["gcp"].kubernetes
    assert isinstance(kube, StubKubernetes)
    kube.quota = answer
    parsed = FleetDocument.model_validate(document)
    plan = make_plan(parsed, state, tenant_id=TENANT)
    changes = flavor_changes(endings(plan.items), parsed, state, one_zone)
    accounts = {a.name: ProviderAccount(a.name, a.provider, TENANT, a.config) for a in parsed.provider_accounts}
    return dataclasses.replace(plan, quota=await check_quotas(changes, accounts, providers)), kube


def text(plan: Any) -> str:
    console = Console(width=200, force_terminal=False, record=True, file=io.StringIO())
    console.print(render_plan(plan))
    return console.export_text()


async def test_an_autoscaled_flavor_counts_at_its_upper_bound_and_the_quota_reads_in_the_text() -> None:
    before = example("gke")
    scaled = edit(before, f"{FLAVOR}/autoscaling", {"minNodes": 1, "maxNodes": 4})
    plan, kube = await checks(scaled, applied(before))
    ((place, (need,)),) = kube.asked
    assert (place, need.machine_type, need.count) == ("us-central1", "a3-highgpu-8g", 2), "2 Nodes now, 4 at most"
    assert need.accelerators == Accelerators("nvidia-h100-80gb", 8)
    (check,) = plan.quota
    assert check.quotas[0].adds == 2 and not check.quotas[0].exceeded and plan.warnings == ()
    assert "NVIDIA H100 GPUs (NVIDIA_H100_GPUS, us-central1): 8 in use + 2 = 10 of 24 GPUs" in text(plan)


async def test_an_exceeded_quota_is_marked_and_warned_and_an_unreadable_one_is_a_warning() -> None:
    over, _ = await checks(example("gke"), Snapshot(), (dataclasses.replace(H100, limit=9),))
    shown = text(over)
    assert "! NVIDIA H100 GPUs (NVIDIA_H100_GPUS, us-central1): 8 in use + 2 = 10 of 9 GPUs: exceeds it by 1" in shown
    assert "Warning: account managed-k8s: NVIDIA H100 GPUs (NVIDIA_H100_GPUS, us-central1) would be 10 GPUs" in shown

    denied, _ = await checks(example("gke"), Snapshot(), ComputeError(ErrorCode.PERMISSION_DENIED, "no regions.get"))
    (check,) = denied.quota
    assert check.quotas == () and check.error == "PERMISSION_DENIED: no regions.get"
    assert "managed-k8s (gcp, us-central1): not read: PERMISSION_DENIED: no regions.get" in text(denied)
    assert type(denied).from_dict(denied.to_dict()).quota == denied.quota


async def test_a_plan_that_only_removes_asks_no_quota() -> None:
    before = edit(example("gke"), f"{FLAVOR}/nodes", 3)
    plan, kube = await checks(edit(before, f"{FLAVOR}/nodes", 1), applied(before))
    assert plan.quota == () and kube.asked == []
