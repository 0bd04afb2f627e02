"""Sealed secrets: made from a value, listed and deleted by reference, resealed under the newest server
secret; the value never comes back."""

from __future__ import annotations

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.ops.views import View, iso
from better_compute.secrets import SecretRecord, is_reference
from better_compute.server import Compute

__all__ = ["create_secret", "delete_secret", "list_secrets", "reseal_secrets"]


def secret_view(record: SecretRecord) -> View:
    return {"id": record.id, "reference": record.reference, "createdAt": iso(record.created_at)}


async def create_secret(compute: Compute, tenant_id: str, value: str) -> View:
    """Seal `value`; the answer is the reference to paste into a FleetConfig document."""
    reference = await compute.secrets.create(tenant_id, value)
    for record in await compute.secrets.list(tenant_id):
        if record.reference == reference:
            return secret_view(record)
    raise ComputeError(ErrorCode.UNAVAILABLE, f"secret {reference} was deleted as it was made; make it again")


async def list_secrets(compute: Compute, tenant_id: str) -> list[View]:
    return [secret_view(r) for r in await compute.secrets.list(tenant_id)]


async def delete_secret(compute: Compute, tenant_id: str, ref: str) -> View:
    """Delete by reference or by id; NOT_FOUND when the tenant has no such secret."""
    for record in await compute.secrets.list(tenant_id):
        if ref in (record.id, record.reference):
            await compute.secrets.delete(tenant_id, record.reference)
            return secret_view(record)
    shown = ref if is_reference(ref) or ref.startswith("sec_") else "that reference"
    raise ComputeError(ErrorCode.NOT_FOUND, f"no secret {shown} for this tenant", "/reference")


async def reseal_secrets(compute: Compute, tenant_id: str | None) -> View:
    """Seal again under the newest server secret every value (of one tenant, or of all) not under it yet."""
    report = await compute.secrets.reseal(tenant_id)
    return {
        "keyId": report.key_id,
        "resealed": report.resealed,
        "current": report.current,
        "unreadable": list(report.unreadable),
    }
