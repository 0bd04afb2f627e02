"""The public surface other modules code against (CONTRACTS.md, section C) is decided, not accidental."""

from __future__ import annotations

import better_compute.compute as compute
import better_compute.iam as iam
import better_compute.secrets as secrets

CONTRACT = {
    compute: {
        "Sites",
        "Pools",
        "Nodes",
        "Reservations",
        "Quotas",
        "Site",
        "Pool",
        "Node",
        "Device",
        "Reservation",
        "Assignment",
        "register_node",
        "set_connected",
        "record_heartbeat",
        "set_system_label",
        "cordon",
        "retire",
        "update_inventory",
        "create_pool",
        "create_site",
        "compute_services",
    },
    iam: {"Iam", "Tenant", "ApiKey", "Principal", "require_tenant"},
    secrets: {"Secrets", "parse_reference", "is_reference"},
}


def test_every_contract_name_is_exported_and_every_export_exists() -> None:
    for module, names in CONTRACT.items():
        exported = set(module.__all__)
        assert names <= exported, f"{module.__name__} lacks {sorted(names - exported)}"
        assert all(hasattr(module, name) for name in exported)
