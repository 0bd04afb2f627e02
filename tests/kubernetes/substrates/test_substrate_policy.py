"""The typed substrate policy (kubernetes/policy.py): the stored JSON parses once, into the models
FleetConfig embeds, and identity and in-place change are the models' own rules. No store, no network."""

from __future__ import annotations

import json
from typing import Any

import pytest

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.kubernetes.desired import NodeShape, desired_substrate
from better_compute.kubernetes.names import CAPACITY_LABEL, SUBSTRATE_POOL_LABEL
from better_compute.kubernetes.policy import SHAPE_KEYS, Flavor, Substrate, parse_substrate
from better_compute.kubernetes.provider import Accelerators, Autoscaling

POOL = "pool-0123456789abcdef"

STORED: dict[str, Any] = {
    "kind": "kubernetes",
    "account": "gcp-main",
    "cluster": {"create": {"location": "us-central1", "privateNodes": False}},
    "flavors": [
        {
            "name": "h100",
            "machineType": "a3-highgpu-8g",
            "nodes": 2,
            "gpus": {"type": "nvidia-h100-80gb", "count": 8},
            "zones": ["us-central1-a"],
            "diskGiB": 200,
            "spot": True,
            "autoscaling": {"minNodes": 1, "maxNodes": 4},
            "labels": {"team": "ml"},
        },
        {"name": "cpu", "machineType": "e2-standard-4", "nodes": 1, "spot": False, "labels": {}},
    ],
}
"""A `policy.substrate` as the pool row stores it: FleetConfig's dump (by alias, no None)."""


def substrate(**changes: Any) -> Substrate:
    return parse_substrate({**STORED, **changes})


def flavor(**changes: Any) -> Flavor:
    return Flavor.model_validate({**STORED["flavors"][0], **changes})


def test_the_stored_policy_parses_into_the_model_and_dumps_back_byte_for_byte() -> None:
    parsed = parse_substrate(STORED)
    assert parsed.mode == "create"
    assert parsed.flavors[0].gpus is not None and parsed.flavors[0].gpus.count == 8
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert json.dumps(dumped) == json.dumps(STORED)


@pytest.mark.parametrize(
    ("stored", "path"),
    [
        ({**STORED, "flavors": [{"name": "h100", "nodes": 1}]}, "/policy/substrate/flavors/0/machineType"),
        ({**STORED, "flavors": [{**STORED["flavors"][1], "nodes": "2"}]}, "/policy/substrate/flavors/0/nodes"),
        ({**STORED, "cluster": {"create": {"location": "x"}, "adopt": "y"}}, "/policy/substrate/cluster"),
        ({**STORED, "colour": "blue"}, "/policy/substrate/colour"),
        ({k: v for k, v in STORED.items() if k != "account"}, "/policy/substrate/account"),
    ],
)
def test_a_stored_policy_that_does_not_parse_names_each_field_as_a_json_pointer(
    stored: dict[str, Any], path: str
) -> None:
    with pytest.raises(ComputeError) as caught:
        parse_substrate(stored)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert path in [p.path for p in caught.value.problems]


def test_the_desired_substrate_refuses_a_policy_it_cannot_parse_with_the_field_not_a_key_error() -> None:
    with pytest.raises(ComputeError) as caught:
        desired_substrate(POOL, {**STORED, "flavors": [{"name": "h100", "nodes": 1}]})
    assert caught.value.path == "/policy/substrate/flavors/0/machineType"


def test_identity_is_the_account_and_the_clusters_place() -> None:
    assert parse_substrate(STORED).identity() == {
        "account": "gcp-main",
        "cluster.create.location": "us-central1",
        "cluster.create.privateNodes": False,
    }
    adopted = substrate(cluster={"adopt": "c-1"})
    assert adopted.identity() == {"account": "gcp-main", "cluster.adopt": "c-1"}
    assert adopted.adopted() == ("gcp-main", "c-1")
    assert parse_substrate(STORED).adopted() is None


def test_privatenodes_left_out_is_the_same_identity_as_false() -> None:
    same = substrate(cluster={"create": {"location": "us-central1"}})
    assert parse_substrate(STORED).identity_change(same) is None


def test_a_size_or_flavor_change_keeps_the_identity() -> None:
    grown = substrate(flavors=[{**STORED["flavors"][0], "nodes": 3}])
    assert parse_substrate(STORED).identity_change(grown) is None


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (
            {"account": "gcp-other"},
            'policy.substrate.account changes "gcp-main" → "gcp-other": the account and the cluster\'s place are '
            "the substrate's identity and never change in place",
        ),
        (
            {"cluster": {"create": {"location": "europe-west4"}}},
            'policy.substrate.cluster.create.location changes "us-central1" → "europe-west4": the account and '
            "the cluster's place are the substrate's identity and never change in place",
        ),
        (
            {"cluster": {"create": {"location": "us-central1", "privateNodes": True}}},
            "policy.substrate.cluster.create.privateNodes changes false → true: the account and the cluster's "
            "place are the substrate's identity and never change in place",
        ),
        (
            {"cluster": {"adopt": "c-1"}},
            "the substrate adopts a cluster instead of creating one: its cluster is its identity",
        ),
    ],
)
def test_an_identity_change_says_which_field_moves(changes: dict[str, Any], reason: str) -> None:
    assert parse_substrate(STORED).identity_change(substrate(**changes)) == reason


def test_creating_instead_of_adopting_is_an_identity_change() -> None:
    adopted = substrate(cluster={"adopt": "c-1"})
    assert adopted.identity_change(parse_substrate(STORED)) == (
        "the substrate creates a cluster instead of adopting one: its cluster is its identity"
    )
    assert adopted.identity_change(substrate(cluster={"adopt": "c-2"})) == (
        'policy.substrate.cluster.adopt changes "c-1" → "c-2": the account and the cluster\'s place are the '
        "substrate's identity and never change in place"
    )


def test_size_bounds_and_labels_change_in_place() -> None:
    before = flavor()
    assert before.reshaped(flavor(nodes=4)) == []
    assert before.reshaped(flavor(autoscaling={"minNodes": 0, "maxNodes": 8})) == []
    assert before.reshaped(flavor(labels={"team": "infra"})) == []


def test_every_shape_key_is_refused_in_place_in_the_order_plans_name_them() -> None:
    before = flavor()
    moved = flavor(
        machineType="a3-megagpu-8g",
        gpus={"type": "nvidia-h100-mega-80gb", "count": 8},
        zones=["us-central1-b"],
        diskGiB=400,
        spot=False,
    )
    assert before.reshaped(moved) == list(SHAPE_KEYS)
    assert before.reshaped(flavor(gpus=None)) == ["gpus"]
    assert before.reshaped(flavor(diskGiB=None)) == ["diskGiB"]


def test_a_substrate_reshapes_only_the_flavors_it_keeps_by_name() -> None:
    new = substrate(
        flavors=[
            {**STORED["flavors"][0], "name": "h100-new", "machineType": "x"},  # a new flavor: no reshape
            {**STORED["flavors"][1], "machineType": "e2-standard-8"},
        ]
    )
    assert parse_substrate(STORED).reshaped(new) == [("cpu", ["machineType"])]


def test_a_flavor_asks_for_a_node_pool_named_and_labelled_for_its_pool() -> None:
    spec = flavor().node_pool(POOL)
    assert spec.name == "bc-abcdef-h100"
    assert dict(spec.labels) == {SUBSTRATE_POOL_LABEL: POOL, "team": "ml", CAPACITY_LABEL: "spot"}
    assert spec.accelerators == Accelerators("nvidia-h100-80gb", 8)
    assert (spec.node_count, spec.zones, spec.disk_gib, spec.spot) == (2, ("us-central1-a",), 200, True)
    assert spec.autoscaling == Autoscaling(1, 4)
    assert CAPACITY_LABEL not in flavor(spot=False).node_pool(POOL).labels


def test_a_node_pool_rows_shape_reads_back_as_the_spec_it_was_written_from() -> None:
    spec = flavor().node_pool(POOL)
    stored = json.loads(json.dumps(NodeShape.of(spec).to_json()))  # through the JSON column
    assert NodeShape.stored(stored).spec(spec.name, spec.node_count, spec.autoscaling) == spec
    assert stored == {
        "machineType": "a3-highgpu-8g",
        "accelerators": {"type": "nvidia-h100-80gb", "count": 8},
        "spot": True,
        "zones": ["us-central1-a"],
        "diskGiB": 200,
        "labels": {SUBSTRATE_POOL_LABEL: POOL, "team": "ml", CAPACITY_LABEL: "spot"},
    }


def test_desired_substrate_for_a_created_and_an_adopted_cluster() -> None:
    created = desired_substrate(POOL, STORED)
    assert (created.mode, created.account, created.adopt_id) == ("create", "gcp-main", None)
    assert created.cluster is not None and created.cluster.name == "bc-6789abcdef"
    assert created.cluster.labels == {SUBSTRATE_POOL_LABEL: POOL}
    assert [f.flavor for f in created.flavors] == ["h100", "cpu"]
    adopted = desired_substrate(POOL, {**STORED, "cluster": {"adopt": "c-1"}})
    assert (adopted.mode, adopted.cluster, adopted.adopt_id) == ("adopt", None, "c-1")


def test_disruption_booked_nodes_defaults_to_wait_and_takes_only_its_three_values() -> None:
    assert substrate().booked_nodes == "wait"
    assert substrate(disruption={}).booked_nodes == "wait"
    assert substrate(disruption={"bookedNodes": "refuse"}).booked_nodes == "refuse"
    assert "disruption" not in substrate().model_dump(by_alias=True, exclude_none=True), "absent stays absent"
    with pytest.raises(ComputeError) as caught:
        substrate(disruption={"bookedNodes": "evict"})
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert [p.path for p in caught.value.problems] == ["/policy/substrate/disruption/bookedNodes"]
