"""Sealed secrets: made from a value, listed and deleted by reference, resealed under the newest server
secret; the value never comes back."""

from __future__ import annotations

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.ids import new_id
from better_compute.ops.idempotency import claim
from better_compute.ops.views import View, iso
from better_compute.secrets import SecretRecord, check_value, is_reference
from better_compute.server import Compute

__all__ = ["create_secret", "delete_secret", "list_secrets", "reseal_secrets"]


def secret_view(record: SecretRecord) -> View:
    return {"id": record.id, "reference": record.reference, "createdAt": iso(record.created_at)}


async def create_secret(compute: Compute, tenant_id: str, value: str, *, idempotency_key: str | None = None) -> View:
    """Seal `value`; the answer is the reference to paste into a FleetConfig document.

    With `idempotency_key`, a retry with the same value answers the secret made (ops.idempotency: the value
    is part of the request's hash, an HMAC under the client's key, and is never kept outside its sealed row)."""
    secret_id = None
    if idempotency_key is not None:
        check_value(value, "/value")  # a refused value records nothing: the key stays free to send it corrected
        secret_id = await claim(
            compute, tenant_id, "secrets.create", idempotency_key, {"value": value}, lambda: new_id("sec")
        )
    reference = await compute.secrets.create(tenant_id, value, secret_id=secret_id)
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
