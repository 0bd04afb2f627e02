"""Random and mutated documents: a valid plan or INVALID_INPUT with paths, never anything else, never a partial write.

Hypothesis drives two properties. The pure one (2,000 documents) feeds validation
and planning. The store one applies a stream of mutated documents, with and without
prune, to one database per backend: each apply either succeeds completely (planning
the same document again shows no changes) or is refused with every row as it was.
"""

from __future__ import annotations

import asyncio
import copy
import re
import uuid
from typing import Any

from fleet_documents import TENANT, applied, example
from fleet_store import harness
from fleet_stub import MACHINES, stub_providers
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.input import check_value
from better_compute.fleet.plan import Action, Plan, make_plan
from better_compute.fleet.validate import validate_document
from better_compute.store import Database

TENANTS: dict[str, dict[str, str]] = {}
POINTER = re.compile(r"^(/([^~/]|~[01])*)*$")
NAMES = ["k8s", "gpu-fleet", "old-fleet", "managed-k8s", "h100", "l4", "other", "Bad Name", ""]

UNSTORABLE = ["\ud800", "a\x00b", float("nan"), float("inf"), 10**40]
"""Values no database keeps the same way (or at all): the input boundary refuses each."""

leaves = st.one_of(
    st.sampled_from(UNSTORABLE),
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=12),
    st.integers(),
    st.floats(allow_nan=False),
    st.sampled_from(NAMES),
    st.text(max_size=8),
)
json_values = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from([*NAMES, "name", "nodes", "site"]), inner, max_size=3),
    ),
    max_leaves=8,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*prefix, index)))
    return out


def _semantic(doc: dict[str, Any], data: st.DataObject) -> None:
    """Changes an operator makes: sizes, places, flavors, pools; most of them valid."""
    pools = doc.get("pools", [])
    if not pools:
        return
    pool = data.draw(st.sampled_from(pools))
    substrate = pool.get("policy", {}).get("substrate")
    choice = data.draw(st.integers(0, 7))
    if choice == 0 and substrate:
        substrate["flavors"][0]["nodes"] = data.draw(st.integers(0, 6))
    elif choice == 1 and substrate and "create" in substrate["cluster"]:
        substrate["cluster"]["create"]["location"] = data.draw(
            st.sampled_from(["us-central1", "us-east-1", "tor1", "us-east-1a"])
        )
    elif choice == 2 and substrate:
        provider = doc["providerAccounts"][0]["provider"]
        machine, gpus = data.draw(st.sampled_from(sorted(MACHINES[provider].items())))
        flavor = {"name": data.draw(st.sampled_from(["h100", "l4", "extra"])), "machineType": machine, "nodes": 1}
        if gpus:
            flavor["gpus"] = {"type": gpus[0], "count": gpus[1]}
        substrate["flavors"].append(flavor)
    elif choice == 3 and substrate:
        pool["policy"].pop("substrate")
    elif choice == 4:
        extra = copy.deepcopy(pool)
        extra["name"] = data.draw(st.sampled_from(["old-fleet", "second", "gpu-fleet"]))
        pools.append(extra)
    elif choice == 5:
        pools.remove(pool)
    elif choice == 6 and substrate:
        substrate["cluster"] = data.draw(
            st.sampled_from(
                [{"adopt": "us-central1/c1"}, {"create": {"location": "us-central1", "privateNodes": True}}]
            )
        )
    elif choice == 7 and substrate:
        substrate["flavors"][0]["spot"] = data.draw(st.booleans())


def _structural(doc: dict[str, Any], data: st.DataObject) -> None:
    """Anything at any place: a new value, a deleted key, an unknown key, a duplicated entry."""
    path = data.draw(st.sampled_from(_paths(doc)[1:]))
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    how = data.draw(st.integers(0, 3))
    if how == 0:
        parent[path[-1]] = data.draw(json_values)
    elif how == 1:
        del parent[path[-1]]
    elif how == 2 and isinstance(parent[path[-1]], dict):
        parent[path[-1]][data.draw(st.sampled_from(["zone", "extra", "Name"]))] = data.draw(leaves)
    elif how == 3 and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[path[-1]]))


@st.composite
def documents(draw: st.DrawFn, tenant_id: str = TENANT) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    doc = example(draw(st.sampled_from(["gke", "eks", "doks"])), tenant_id=tenant_id)
    data = draw(st.data())
    # An operator's changes first, on an intact document; then damage anywhere.
    for _ in range(draw(st.integers(0, 3))):
        _semantic(doc, data)
    for _ in range(draw(st.integers(0, 2))):
        if len(_paths(doc)) > 1:
            _structural(doc, data)
    return doc


def _check_refusal(error: ComputeError) -> None:
    assert error.code is ErrorCode.INVALID_INPUT, error
    assert error.problems, "an invalid document names its problems"
    for problem in error.problems:
        assert POINTER.match(problem.path), problem.path
        assert problem.message


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents(), st.booleans())
def test_any_document_gives_a_plan_or_invalid_input_with_paths(document: Any, typed: bool) -> None:
    state = applied(example("gke"))

    async def check() -> None:
        try:
            check_value(document)
            parsed = await validate_document(document, tenant_id=TENANT, providers=stub_providers(typed=typed))
        except ComputeError as error:
            event("invalid")
            _check_refusal(error)
            return
        event("planned")
        for prune in (False, True):
            plan = make_plan(parsed, state, tenant_id=TENANT, prune=prune)
            assert Plan.from_dict(plan.to_dict()) == plan
            assert all(i.reason for i in plan.items if i.action is Action.BLOCKED)
            assert prune or not any(i.action is Action.DELETE for i in plan.items)

    asyncio.run(check())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_apply_of_any_document_is_all_or_nothing(database_url: str, data: st.DataObject) -> None:
    # One tenant per database for all examples: each apply meets the state the ones before it left.
    tenant = TENANTS.setdefault(database_url, {})

    async def check() -> None:
        db = Database(database_url)
        try:
            h = await harness(db, SimClock(), name=f"fuzz-{uuid.uuid4().hex[:8]}", tenant_id=tenant.get("id"))
            tenant["id"] = h.tenant_id
            document = data.draw(documents(tenant_id=h.tenant_id))
            prune = data.draw(st.booleans())
            before = await h.snapshot_rows()
            try:
                await h.fleet.apply(document, tenant_id=h.tenant_id, prune=prune)
            except ComputeError as error:
                event(f"refused {error.code.value}")
                assert await h.snapshot_rows() == before, "a refused apply wrote something"
                if error.code is ErrorCode.INVALID_STATE:
                    assert error.problems and all(
                        p.message.endswith(("instead", "another name", "is deleted")) for p in error.problems
                    )
                else:
                    _check_refusal(error)
                # and the tenant can still plan
                await h.fleet.plan(example("gke", tenant_id=h.tenant_id), tenant_id=h.tenant_id, prune=True)
                return
            event("applied")
            after = await h.fleet.plan(document, tenant_id=h.tenant_id, prune=prune)
            assert not after.has_changes, "an apply that succeeded wrote all of its plan"
        finally:
            await db.dispose()

    asyncio.run(check())
