"""ops: Idempotency-Key records keep a hash of the key, never the key, and may keep a sealed answer.

The key is what opens a one-time answer sealed under it (a new API key's value), so the row is
found by HKDF-SHA256 of the key and the request hash is an HMAC under a key derived from it
(see better_compute.ops.idempotency). Rows made before keep answering: their key is hashed here
and their request hash (a SHA-256 of the parameters) wrapped in that HMAC, which is what the
new code computes. An index on (tenant, created_at) lets each claim purge the tenant's expired rows.

Revision ID: ops_0002
Revises: ops_0001
"""

import hashlib
import hmac

import sqlalchemy as sa
from alembic import op
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

revision = "ops_0002"
down_revision = "ops_0001"
branch_labels = None
depends_on = None

_INFO = b"better-compute/idempotency/v1"  # frozen here: what ops.idempotency derived when this ran


def _derive(key: str, purpose: bytes, tenant_id: str, operation: str) -> bytes:
    info = b"\0".join((_INFO, purpose, tenant_id.encode(), operation.encode()))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(key.encode())


def upgrade() -> None:
    keys = sa.table(
        "ops_idempotency_keys",
        sa.column("tenant_id", sa.String),
        sa.column("operation", sa.String),
        sa.column("key", sa.String),
        sa.column("request_hash", sa.String),
    )
    bind = op.get_bind()
    for row in bind.execute(sa.select(keys.c.tenant_id, keys.c.operation, keys.c.key, keys.c.request_hash)).all():
        secret = _derive(row.key, b"request", row.tenant_id, row.operation)
        bind.execute(
            keys.update()
            .where(keys.c.tenant_id == row.tenant_id, keys.c.operation == row.operation, keys.c.key == row.key)
            .values(
                key=_derive(row.key, b"index", row.tenant_id, row.operation).hex(),
                request_hash=hmac.new(secret, bytes.fromhex(row.request_hash), hashlib.sha256).hexdigest(),
            )
        )
    with op.batch_alter_table("ops_idempotency_keys") as batch:
        batch.alter_column("key", new_column_name="key_hash", type_=sa.String(64), existing_nullable=False)
        batch.add_column(sa.Column("sealed_answer", sa.LargeBinary(), nullable=True))
    op.create_index(
        "ix_ops_idempotency_keys_tenant_id_created_at", "ops_idempotency_keys", ["tenant_id", "created_at"]
    )


def downgrade() -> None:
    # The keys cannot be had back from their hashes: the records are dropped (retries then make anew).
    op.drop_index("ix_ops_idempotency_keys_tenant_id_created_at", table_name="ops_idempotency_keys")
    op.execute("DELETE FROM ops_idempotency_keys")
    with op.batch_alter_table("ops_idempotency_keys") as batch:
        batch.drop_column("sealed_answer")
        batch.alter_column("key_hash", new_column_name="key", type_=sa.String(255), existing_nullable=False)
