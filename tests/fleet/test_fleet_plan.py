"""Planning, a pure function: identity changes blocked, sizing in place, prune and no prune."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fleet_documents import DELETE, SUBSTRATE, TENANT, applied, edit, example

from better_compute.core.errors import ComputeError
from better_compute.fleet.diff import MISSING, Change
from better_compute.fleet.plan import Action, Plan, SubstrateAction, make_plan
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import Snapshot


def plan_of(document: dict[str, Any], state: Snapshot, *, prune: bool = False) -> Plan:
    return make_plan(FleetDocument.model_validate(document), state, tenant_id=TENANT, prune=prune)


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
def test_an_empty_state_creates_everything(provider: str) -> None:
    plan = plan_of(example(provider), Snapshot())
    assert [(i.kind, i.action) for i in plan.items] == [
        ("site", Action.CREATE),
        ("account", Action.CREATE),
        ("pool", Action.CREATE),
    ]
    pool = plan.item("pool", "gpu-fleet")
    assert pool.substrate is SubstrateAction.CREATE
    assert Change("policy.substrate.flavors[h100].nodes", MISSING, 2) in pool.changes
    assert plan.has_changes and not plan.blocked


@pytest.mark.parametrize("provider", ["gke", "eks", "doks"])
def test_the_applied_document_plans_no_changes(provider: str) -> None:
    document = example(provider)
    plan = plan_of(document, applied(document))
    assert {i.action for i in plan.items} == {Action.UNCHANGED}
    assert not plan.has_changes
    assert plan.fingerprint == applied(document).fingerprint()


IDENTITY_CHANGES: list[tuple[str, str, Any]] = [
    ("account", f"{SUBSTRATE}/account", "other-account"),
    ("location", f"{SUBSTRATE}/cluster/create/location", "us-east4"),
    ("private nodes", f"{SUBSTRATE}/cluster/create/privateNodes", True),
    ("create to adopt", f"{SUBSTRATE}/cluster", {"adopt": "us-central1/existing"}),
]


def _with_second_account(document: dict[str, Any]) -> dict[str, Any]:
    other = copy.deepcopy(document["providerAccounts"][0])
    other["name"] = "other-account"
    return edit(document, "/providerAccounts", [*document["providerAccounts"], other])


@pytest.mark.parametrize(("what", "path", "value"), IDENTITY_CHANGES, ids=[c[0] for c in IDENTITY_CHANGES])
def test_each_identity_change_is_blocked(what: str, path: str, value: Any) -> None:
    before = _with_second_account(example("gke"))
    plan = plan_of(edit(before, path, value), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.BLOCKED
    assert pool.reason is not None and pool.reason.endswith("create a new pool instead")
    assert pool.changes, "the blocked item still shows what would change"
    assert plan.blocked == [pool]


def test_adopt_id_change_and_adopt_to_create_are_blocked() -> None:
    adopting = edit(example("gke"), f"{SUBSTRATE}/cluster", {"adopt": "us-central1/one"})
    moved = plan_of(edit(adopting, f"{SUBSTRATE}/cluster/adopt", "us-central1/two"), applied(adopting))
    assert moved.item("pool", "gpu-fleet").action is Action.BLOCKED
    assert "cluster.adopt" in (moved.item("pool", "gpu-fleet").reason or "")
    created = plan_of(example("gke"), applied(adopting))
    assert created.item("pool", "gpu-fleet").action is Action.BLOCKED
    assert "creates a cluster instead of adopting one" in (created.item("pool", "gpu-fleet").reason or "")


def test_private_nodes_false_and_absent_are_the_same_identity() -> None:
    before = example("gke")
    plan = plan_of(edit(before, f"{SUBSTRATE}/cluster/create/privateNodes", False), applied(before))
    assert plan.item("pool", "gpu-fleet").action is Action.UNCHANGED


SIZING_CHANGES: list[tuple[str, str, Any, str, Any, Any]] = [
    ("nodes", f"{SUBSTRATE}/flavors/0/nodes", 5, "policy.substrate.flavors[h100].nodes", 2, 5),
    (
        "autoscaling",
        f"{SUBSTRATE}/flavors/0/autoscaling",
        {"minNodes": 1, "maxNodes": 4},
        "policy.substrate.flavors[h100].autoscaling.maxNodes",
        MISSING,
        4,
    ),
    (
        "flavor added",
        f"{SUBSTRATE}/flavors/1",
        {"name": "l4", "machineType": "g2-standard-4", "nodes": 1, "gpus": {"type": "nvidia-l4", "count": 1}},
        "policy.substrate.flavors[l4].machineType",
        MISSING,
        "g2-standard-4",
    ),
    (
        "labels",
        f"{SUBSTRATE}/flavors/0/labels",
        {"team": "ml"},
        "policy.substrate.flavors[h100].labels.team",
        MISSING,
        "ml",
    ),
]


@pytest.mark.parametrize(
    ("what", "path", "value", "field", "old", "new"), SIZING_CHANGES, ids=[c[0] for c in SIZING_CHANGES]
)
def test_each_sizing_change_is_an_update_in_place(
    what: str, path: str, value: Any, field: str, old: Any, new: Any
) -> None:
    before = example("gke")
    plan = plan_of(edit(before, path, value), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE
    assert pool.substrate is SubstrateAction.UPDATE
    assert Change(field, old, new) in pool.changes
    assert not plan.blocked


def test_a_flavor_removed_is_in_place_and_reordering_is_no_change() -> None:
    two = edit(
        example("gke"),
        f"{SUBSTRATE}/flavors/1",
        {"name": "l4", "machineType": "g2-standard-4", "nodes": 1, "gpus": {"type": "nvidia-l4", "count": 1}},
    )
    reordered = edit(two, f"{SUBSTRATE}/flavors", list(reversed(two["pools"][0]["policy"]["substrate"]["flavors"])))
    same = plan_of(reordered, applied(two)).item("pool", "gpu-fleet")
    assert (same.action, same.substrate) == (Action.UNCHANGED, None)
    removed = plan_of(example("gke"), applied(two)).item("pool", "gpu-fleet")
    assert removed.action is Action.UPDATE
    assert Change("policy.substrate.flavors[l4].nodes", 1, MISSING) in removed.changes


def test_a_reshaped_flavor_is_planned_with_a_warning() -> None:
    before = example("gke")
    plan = plan_of(edit(before, f"{SUBSTRATE}/flavors/0/spot", True), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE
    assert any("node pools never change shape" in n for n in pool.notes)


def test_pool_fields_update_in_place_without_touching_the_substrate() -> None:
    before = example("eks")
    plan = plan_of(edit(before, "/pools/0/policy/kubernetes/platformOperated", False), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE and pool.substrate is None
    assert pool.changes == (Change("policy.kubernetes.platformOperated", True, False),)


def test_site_and_account_updates_carry_field_diffs() -> None:
    before = example("eks")
    after = edit(before, "/sites/0/kind", "dedicated")
    after = edit(after, "/providerAccounts/0/config/zones", ["us-east-1a"])
    plan = plan_of(after, applied(before))
    assert plan.item("site", "k8s").changes == (Change("kind", "shared", "dedicated"),)
    assert plan.item("account", "managed-k8s").changes == (
        Change("config.zones", ["us-east-1a", "us-east-1b"], ["us-east-1a"]),
    )


def test_an_account_never_changes_provider() -> None:
    before = example("gke")
    plan = plan_of(edit(before, "/providerAccounts/0/provider", "aws"), applied(before))
    account = plan.item("account", "managed-k8s")
    assert account.action is Action.BLOCKED
    assert "never changes provider" in (account.reason or "")


def _second_pool(document: dict[str, Any]) -> dict[str, Any]:
    other = copy.deepcopy(document["pools"][0])
    other["name"] = "old-fleet"
    return edit(document, "/pools", [*document["pools"], other])


def test_without_prune_a_pool_missing_from_the_document_is_kept() -> None:
    before = _second_pool(example("doks"))
    plan = plan_of(example("doks"), applied(before))
    old = plan.item("pool", "old-fleet")
    assert old.action is Action.KEEP and old.substrate is SubstrateAction.KEEP
    assert "--prune would archive it and tear down its substrate" in old.notes[0]
    assert not plan.has_changes


def test_with_prune_a_pool_missing_from_the_document_is_deleted_and_its_site_and_account_wait() -> None:
    before = _second_pool(example("doks"))
    plan = plan_of(example("doks"), applied(before), prune=True)
    old = plan.item("pool", "old-fleet")
    assert old.action is Action.DELETE and old.substrate is SubstrateAction.TEARDOWN
    assert plan.has_changes
    # An empty document prunes every pool; the site and account they use are kept until teardown ends.
    empty = plan_of({"version": 1}, applied(before), prune=True)
    assert {i.name: i.action for i in empty.items} == {
        "k8s": Action.KEEP,
        "managed-k8s": Action.KEEP,
        "gpu-fleet": Action.DELETE,
        "old-fleet": Action.DELETE,
    }
    assert "still used by pool gpu-fleet, old-fleet" in empty.item("site", "k8s").notes[0]


def test_with_prune_an_unused_site_and_account_are_deleted() -> None:
    before = example("gke")
    after = edit(edit(before, "/pools", []), "/providerAccounts", [])
    after = edit(after, "/sites", [])
    plan = plan_of(
        after,
        Snapshot.of(list(applied(before).sites.values()), list(applied(before).accounts.values()), []),
        prune=True,
    )
    assert {i.name: i.action for i in plan.items} == {"k8s": Action.DELETE, "managed-k8s": Action.DELETE}
    unpruned = plan_of(after, Snapshot.of(list(applied(before).sites.values()), [], []))
    assert unpruned.item("site", "k8s").action is Action.KEEP


def test_taking_the_substrate_out_is_a_teardown_only_with_prune() -> None:
    before = example("gke")
    after = edit(before, f"{SUBSTRATE}", DELETE)
    kept = plan_of(after, applied(before)).item("pool", "gpu-fleet")
    assert kept.action is Action.KEEP and kept.substrate is SubstrateAction.KEEP
    assert kept.notes[0].startswith("substrate kept")
    assert not kept.changes
    pruned = plan_of(after, applied(before), prune=True).item("pool", "gpu-fleet")
    assert pruned.action is Action.UPDATE and pruned.substrate is SubstrateAction.TEARDOWN
    assert Change("policy.substrate.kind", "kubernetes", MISSING) in pruned.changes


def test_without_prune_other_changes_still_apply_while_the_substrate_is_kept() -> None:
    before = example("gke")
    after = edit(edit(before, f"{SUBSTRATE}", DELETE), "/pools/0/gpuModel", "H200")
    pool = plan_of(after, applied(before)).item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE and pool.substrate is SubstrateAction.KEEP
    assert pool.changes == (Change("gpuModel", "H100", "H200"),)


def test_adding_a_substrate_to_a_pool_creates_it() -> None:
    bare = edit(example("gke"), f"{SUBSTRATE}", DELETE)
    pool = plan_of(example("gke"), applied(bare)).item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE and pool.substrate is SubstrateAction.CREATE


def test_the_fingerprint_follows_the_state() -> None:
    before = example("gke")
    state = applied(before)
    assert state.fingerprint() == applied(copy.deepcopy(before)).fingerprint()
    assert state.fingerprint() != applied(edit(before, f"{SUBSTRATE}/flavors/0/nodes", 3)).fingerprint()
    assert state.fingerprint() != applied(edit(before, "/sites/0/region", "us-east4")).fingerprint()


def test_a_plan_survives_its_json_form() -> None:
    before = _second_pool(example("gke"))
    plan = plan_of(edit(example("gke"), f"{SUBSTRATE}/flavors/0/nodes", 4), applied(before), prune=True)
    assert Plan.from_dict(plan.to_dict()) == plan
    with pytest.raises(ComputeError) as caught:
        Plan.from_dict({"format": 1, "items": []})
    assert caught.value.code == "INVALID_INPUT"


def test_a_new_pool_named_like_one_being_torn_down_is_blocked() -> None:
    from dataclasses import replace

    state = applied(example("gke"))
    tearing = Snapshot.of(
        list(state.sites.values()),
        list(state.accounts.values()),
        [replace(state.pools["gpu-fleet"], state="archiving")],
    )
    pool = plan_of(example("gke"), tearing).item("pool", "gpu-fleet")
    assert pool.action is Action.BLOCKED
    assert "still being torn down" in (pool.reason or "")


def test_a_cluster_still_held_by_another_pool_cannot_be_adopted_again() -> None:
    adopting = edit(example("gke"), f"{SUBSTRATE}/cluster", {"adopt": "us-central1/one"})
    renamed = edit(adopting, "/pools/0/name", "new-fleet")
    for prune in (False, True):
        plan = plan_of(renamed, applied(adopting), prune=prune)
        new = plan.item("pool", "new-fleet")
        assert new.action is Action.BLOCKED
        assert "still held by pool gpu-fleet" in (new.reason or "")
    other = plan_of(edit(renamed, f"{SUBSTRATE}/cluster/adopt", "us-central1/two"), applied(adopting), prune=True)
    assert other.item("pool", "new-fleet").action is Action.CREATE


def test_a_pools_degraded_policy_is_in_the_schema_and_the_plan_and_defaults_to_keep() -> None:
    before = example("eks")
    plan = plan_of(edit(before, "/pools/0/policy/health", {"degraded": "end"}), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE and pool.substrate is None
    assert pool.changes == (Change("policy.health.degraded", MISSING, "end"),)
    defaulted = FleetDocument.model_validate(edit(before, "/pools/0/policy/health", {}))
    assert defaulted.pools[0].policy.health is not None and defaulted.pools[0].policy.health.degraded == "keep"
    with pytest.raises(ValueError, match="degraded"):
        FleetDocument.model_validate(edit(before, "/pools/0/policy/health", {"degraded": "drop"}))


def test_the_substrates_disruption_rule_is_in_the_schema_and_the_plan_and_defaults_to_wait() -> None:
    before = example("gke")
    plan = plan_of(edit(before, f"{SUBSTRATE}/disruption", {"bookedNodes": "refuse"}), applied(before))
    pool = plan.item("pool", "gpu-fleet")
    assert pool.action is Action.UPDATE and pool.substrate is SubstrateAction.UPDATE
    assert pool.changes == (Change("policy.substrate.disruption.bookedNodes", MISSING, "refuse"),)
    defaulted = FleetDocument.model_validate(edit(before, f"{SUBSTRATE}/disruption", {}))
    assert defaulted.pools[0].policy.substrate is not None
    assert defaulted.pools[0].policy.substrate.booked_nodes == "wait"
    with pytest.raises(ValueError, match="bookedNodes"):
        FleetDocument.model_validate(edit(before, f"{SUBSTRATE}/disruption", {"bookedNodes": "evict"}))
