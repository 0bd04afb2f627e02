"""The plan's cost per hour from the operator's price table: pure, from the items and the snapshot."""

from __future__ import annotations

import io
from typing import Any

import pytest
from fleet_documents import DELETE, SUBSTRATE, TENANT, applied, edit, example
from rich.console import Console

from better_compute.core.errors import ComputeError
from better_compute.fleet.plan import Plan, make_plan
from better_compute.fleet.prices import load_prices, parse_prices
from better_compute.fleet.render import render_plan
from better_compute.fleet.schema import FleetDocument
from better_compute.fleet.snapshot import Snapshot

TABLE = {
    "version": 1,
    "currency": "EUR",
    "onDemand": {"gcp": {"a3-highgpu-8g": 88.5}, "aws": {"p5.48xlarge": 98.25}},
    "spot": {"gcp": {"a3-highgpu-8g": 26.5}},
}
FLAVOR = f"{SUBSTRATE}/flavors/0"


def zones(provider: str, config: Any, flavor_zones: tuple[str, ...]) -> int:
    """Two zones per GKE flavor, as the driver would count them; a total elsewhere."""
    return 2 if provider == "gcp" else 1


def plan_of(document: dict[str, Any], state: Snapshot, *, prune: bool = False, table: Any = TABLE) -> Plan:
    parsed = FleetDocument.model_validate(document)
    return make_plan(parsed, state, tenant_id=TENANT, prune=prune, prices=parse_prices(table), zones=zones)


def text_of(plan: Plan) -> str:
    console = Console(width=200, force_terminal=False, record=True, file=io.StringIO())
    console.print(render_plan(plan))
    return console.export_text()


def test_a_resize_costs_the_new_nodes_per_zone_and_the_total_sums_the_changes() -> None:
    before = example("gke")
    plan = plan_of(edit(before, f"{FLAVOR}/nodes", 3), applied(before))
    assert plan.cost is not None
    (line,) = plan.cost.lines
    assert (line.pool, line.flavor, line.machine_type, line.before, line.after) == (
        "gpu-fleet",
        "h100",
        "a3-highgpu-8g",
        (4, 4),
        (6, 6),
    )
    body = plan.to_dict()["cost"]
    assert body["currency"] == "EUR"
    assert body["changes"][0]["perHour"] == {"before": [354.0, 354.0], "after": [531.0, 531.0], "delta": [177.0, 177.0]}
    assert body["delta"] == [177.0, 177.0] and body["unpriced"] == []
    assert Plan.from_dict(plan.to_dict()).cost == plan.cost
    text = text_of(plan)
    assert "Cost per hour of the changes (EUR, from your price table):" in text
    assert "gpu-fleet/h100 (gcp a3-highgpu-8g)  Nodes 4 → 6: 354.00 → 531.00 EUR/h (+177.00)" in text
    assert "total: +177.00 EUR/h" in text


def test_a_create_a_teardown_and_an_unchanged_fleet() -> None:
    document = example("eks")
    created = plan_of(document, Snapshot())
    assert created.cost is not None
    (line,) = created.cost.lines
    assert (line.before, line.after, line.delta) == ((0, 0), (2, 2), (196.5, 196.5))

    torn = plan_of(edit(document, SUBSTRATE, DELETE), applied(document), prune=True)
    assert torn.cost is not None and torn.cost.delta == (-196.5, -196.5)
    kept = plan_of(edit(document, SUBSTRATE, DELETE), applied(document), prune=False)
    assert kept.cost is not None and kept.cost.lines == (), "a substrate kept without --prune costs the same"
    assert plan_of(document, applied(document)).cost == kept.cost
    assert "no change in Nodes, so none in cost" in text_of(kept)


def test_an_autoscaled_flavor_is_costed_at_its_bounds_and_spot_has_its_own_price() -> None:
    before = example("gke")
    scaled = edit(before, f"{FLAVOR}/autoscaling", {"minNodes": 1, "maxNodes": 3})
    spot = edit(scaled, f"{FLAVOR}/spot", True)
    plan = plan_of(spot, Snapshot())
    assert plan.cost is not None
    (line,) = plan.cost.lines
    assert (line.after, line.price, line.delta) == ((2, 6), 26.5, (53.0, 159.0))
    assert "Nodes 0 → 2 to 6: 0.00 → 53.00 to 159.00 EUR/h (+53.00 to +159.00)" in text_of(plan)


def test_a_machine_type_the_table_does_not_name_is_unpriced_never_guessed() -> None:
    document = example("doks", token=f"secret://{TENANT}/sec_doks")
    plan = plan_of(document, Snapshot())
    assert plan.cost is not None
    (line,) = plan.cost.unpriced
    assert (line.provider, line.machine_type, line.price) == ("digitalocean", "gpu-h100x8-640gb", None)
    body = plan.to_dict()["cost"]
    assert body["delta"] == [0.0, 0.0]
    assert body["unpriced"] == [
        {"pool": "gpu-fleet", "flavor": "h100", "provider": "digitalocean", "machineType": "gpu-h100x8-640gb"}
        | {"spot": False}
    ]
    assert body["changes"][0]["perHour"] is None
    text = text_of(plan)
    assert "unpriced: not in the price table" in text and "  total:" not in text


def test_without_a_price_table_the_plan_has_no_cost() -> None:
    parsed = FleetDocument.model_validate(example("gke"))
    plan = make_plan(parsed, Snapshot(), tenant_id=TENANT)
    assert plan.cost is None and plan.to_dict()["cost"] is None
    assert "Cost per hour" not in text_of(plan)


@pytest.mark.parametrize(
    ("table", "problems"),
    [
        ({"currency": "USD"}, [("/version", "is required")]),
        (
            {"version": 1, "currency": "dollars", "onDemand": {"gcp": {"a3-highgpu-8g": -1, "g2": "9"}}, "x": 1},
            [
                ("/currency", "is a currency's three capital letters, such as USD or EUR"),
                ("/onDemand/gcp/a3-highgpu-8g", "Input should be greater than or equal to 0"),
                ("/onDemand/gcp/g2", "Input should be a valid number"),
                ("/x", "unknown key"),
            ],
        ),
        (
            {"version": 1, "spot": {"aws": {"p5.48xlarge": True}}},
            [("/spot/aws/p5.48xlarge", "Input should be a valid number")],
        ),
        ([1, 2], [("", "a price table is an object (version, currency, onDemand, spot)")]),
    ],
)
def test_a_bad_price_table_names_each_field(table: Any, problems: list[tuple[str, str]]) -> None:
    with pytest.raises(ComputeError) as caught:
        parse_prices(table)
    assert sorted((p.path, p.message) for p in caught.value.problems) == sorted(problems)


def test_yaml_and_json_load_alike_and_aliases_or_garbage_are_refused() -> None:
    yaml_text = b"version: 1\nonDemand:\n  gcp:\n    a3-highgpu-8g: 88.5\n"
    json_text = b'{"version": 1, "onDemand": {"gcp": {"a3-highgpu-8g": 88.5}}}'
    assert parse_prices(load_prices(yaml_text, what="t")) == parse_prices(load_prices(json_text, what="t"))
    with pytest.raises(ComputeError, match="aliases are not allowed"):
        load_prices(b"a: &x [1, 2]\nb: *x\n", what="t")
    with pytest.raises(ComputeError, match="t is not YAML or JSON"):
        load_prices(b"version: [1\n", what="t")
    with pytest.raises(ComputeError, match="at most 1048576 bytes"):
        load_prices(b"#" * (1024 * 1024 + 1), what="t")
