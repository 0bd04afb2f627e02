"""FleetConfig documents: schema, validation, plan, apply, prune.

from better_compute.fleet import fleet_module
compute = better_compute(..., modules=[vps(providers=...), ..., fleet_module()])
plan = await compute.fleet.plan(document, tenant_id=...)      # Plan: items, fingerprint, to_dict()
await compute.fleet.apply(document, tenant_id=..., prune=False, plan=None)
"""

from better_compute.fleet.module import FleetModule, fleet_module
from better_compute.fleet.plan import Action, Plan, PlanItem, SubstrateAction
from better_compute.fleet.schema import FleetDocument, json_schema
from better_compute.fleet.service import Fleet

__all__ = [
    "Action",
    "Fleet",
    "FleetDocument",
    "FleetModule",
    "Plan",
    "PlanItem",
    "SubstrateAction",
    "fleet_module",
    "json_schema",
]
