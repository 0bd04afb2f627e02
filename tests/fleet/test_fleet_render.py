"""The plan as text: markers, old → new, notes, the summary line."""

from __future__ import annotations

import copy

from fleet_documents import DELETE, SUBSTRATE, TENANT, applied, edit, example
from rich.console import Console

from better_compute.core.errors import ComputeError, Problem
from better_compute.fleet.plan import make_plan
from better_compute.fleet.render import render_error, render_plan
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import Snapshot


def text(renderable: object) -> str:
    console = Console(width=1000, force_terminal=False, record=True)
    console.print(renderable)
    return console.export_text()


def test_a_first_plan_lists_each_created_field() -> None:
    out = text(render_plan(make_plan(FleetDocument.model_validate(example("eks")), Snapshot(), tenant_id=TENANT)))
    assert "  + site k8s\n" in out
    assert "  + provider account managed-k8s\n" in out
    assert "  + pool gpu-fleet  (substrate: create)\n" in out
    assert '      + policy.substrate.flavors[h100].machineType: "p5.48xlarge"\n' in out
    assert out.rstrip().endswith("Plan: 3 to create, 0 to update, 0 to delete, 0 blocked; 0 unchanged, 0 kept.")


def test_updates_read_old_to_new_and_deletes_say_what_happens() -> None:
    before = example("gke")
    other = copy.deepcopy(before["pools"][0])
    other["name"] = "old-fleet"
    state = applied(edit(before, "/pools/1", other))
    plan = make_plan(
        FleetDocument.model_validate(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 4)),
        state,
        tenant_id=TENANT,
        prune=True,
    )
    out = text(render_plan(plan))
    assert "  ~ pool gpu-fleet  (substrate: update)\n      ~ policy.substrate.flavors[h100].nodes: 2 → 4\n" in out
    assert "  - pool old-fleet  (substrate: teardown)\n      note: archived: its nodes drain" in out
    assert "Plan: 0 to create, 1 to update, 1 to delete, 0 blocked; 2 unchanged, 0 kept." in out
    assert "(with --prune)" in out


def test_a_blocked_plan_says_why_and_that_apply_is_refused() -> None:
    before = example("gke")
    after = edit(before, f"{SUBSTRATE}/cluster/create/location", "us-east4")
    out = text(render_plan(make_plan(FleetDocument.model_validate(after), applied(before), tenant_id=TENANT)))
    assert "  ! pool gpu-fleet\n      blocked: policy.substrate.cluster.create.location changes" in out
    assert "create a new pool instead" in out
    assert '      ~ policy.substrate.cluster.create.location: "us-central1" → "us-east4"\n' in out
    assert "Apply is refused while any item is blocked." in out


def test_a_kept_substrate_and_no_changes() -> None:
    before = example("gke")
    out = text(
        render_plan(
            make_plan(FleetDocument.model_validate(edit(before, SUBSTRATE, DELETE)), applied(before), tenant_id=TENANT)
        )
    )
    assert "  = pool gpu-fleet  (substrate: keep)\n      note: substrate kept" in out
    assert "No changes to apply; the kept items change only with --prune (see their notes)." in out
    unchanged = text(render_plan(make_plan(FleetDocument.model_validate(before), applied(before), tenant_id=TENANT)))
    assert "gpu-fleet" not in unchanged
    assert "3 unchanged" in unchanged
    assert "No changes: the fleet matches the document." in unchanged


def test_errors_are_one_line_per_problem() -> None:
    error = ComputeError.invalid([Problem("/pools/0/site", "no site named 'x' in /sites"), Problem("", "bad")])
    assert text(render_error(error)).splitlines() == [
        "error: INVALID_INPUT at /pools/0/site: no site named 'x' in /sites",
        "error: INVALID_INPUT at /: bad",
    ]
    assert text(render_error(ComputeError("CONFLICT", "moved", "/plan/fingerprint"))).strip() == (
        "error: CONFLICT at /plan/fingerprint: moved"
    )
