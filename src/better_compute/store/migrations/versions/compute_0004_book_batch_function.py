"""compute: the write side of a PostgreSQL booking batch, as one server-side function.

`compute_book_batch` takes a batch's placed requests as arrays (ids, tenants, pools,
nodes, models, GPU counts, bindings, spot flags) and the time, and in one call, in this
order: locks the pools `FOR KEY SHARE` in id order (each must be `active`), locks the
chosen nodes `FOR KEY SHARE` in id order (each must be `ready`), gives each request the
next free devices of its node in index order, inserts the reservations, claims the
devices with `UPDATE ... WHERE reservation_id IS NULL`, and charges each tenant's quota
with an upsert guarded by `gpu_limit IS NULL OR used + n <= gpu_limit`. It returns each
reservation's device ids, or raises SQLSTATE 40001 (serialization_failure) if any of
that fell short, which undoes the whole call: the caller reads again and retries
(see compute/batch.py). SQLite has no such function; its batches write statement by
statement.

Revision ID: compute_0004
Revises: compute_0003
"""

from alembic import op

revision = "compute_0004"
down_revision = "compute_0003"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE FUNCTION compute_book_batch(
    p_ids text[], p_tenants text[], p_pools text[], p_nodes text[], p_models text[], p_counts integer[],
    p_bindings text[], p_spots boolean[], p_now timestamptz
) RETURNS TABLE (out_reservation_id text, out_device_ids text[])
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r record;
    written integer := 0;
    short boolean := false;
    booked_n bigint := 0;
    claimed_n bigint := 0;
    charged_n bigint := 0;
BEGIN
    IF (SELECT count(*) FROM (
            SELECT id FROM compute_pools WHERE id = ANY(p_pools) AND state = 'active' ORDER BY id FOR KEY SHARE
        ) locked) <> (SELECT count(DISTINCT pool_id) FROM unnest(p_pools) pool_id) THEN
        RAISE EXCEPTION 'booking contended: a pool is no longer active' USING ERRCODE = 'serialization_failure';
    END IF;
    FOR r IN
        WITH req AS (
            SELECT * FROM unnest(
                p_ids, p_tenants, p_pools, p_nodes,
                p_models, p_counts, p_bindings, p_spots
            ) WITH ORDINALITY AS u (id, tenant_id, pool_id, node_id, gpu_model, gpu_count, binding, spot, ord)
        ), span AS (
            SELECT id, node_id, gpu_count, sum(gpu_count) OVER (PARTITION BY node_id ORDER BY ord) - gpu_count AS first
            FROM req
        ), ready AS MATERIALIZED (
            SELECT id FROM compute_nodes
            WHERE id = ANY(p_nodes) AND state = 'ready'
            ORDER BY id
            FOR KEY SHARE
        ), free AS (
            SELECT d.id, ready.id AS node_id, row_number() OVER (PARTITION BY ready.id ORDER BY d.idx) - 1 AS k
            FROM ready CROSS JOIN LATERAL (
                SELECT id, idx FROM compute_devices
                WHERE node_id = ready.id AND reservation_id IS NULL AND present
                ORDER BY idx
                LIMIT (SELECT sum(gpu_count) FROM req WHERE req.node_id = ready.id)
            ) d
        ), pick AS (
            SELECT free.id AS device_id, span.id AS reservation_id, free.k
            FROM free JOIN span ON span.node_id = free.node_id AND free.k >= span.first AND free.k < span.first + span.gpu_count
        ), held AS (
            SELECT reservation_id, array_agg(device_id ORDER BY k) AS device_ids FROM pick GROUP BY reservation_id
        ), booked AS (
            INSERT INTO compute_reservations
                (id, tenant_id, pool_id, node_id, gpu_model, gpu_count, device_ids, binding, spot, state, created_at, ended_at)
            SELECT req.id, req.tenant_id, req.pool_id, req.node_id, req.gpu_model, req.gpu_count, to_json(held.device_ids),
                req.binding, req.spot, 'active', p_now, NULL
            FROM req JOIN held ON held.reservation_id = req.id
            RETURNING 1
        ), claimed AS (
            UPDATE compute_devices d SET reservation_id = pick.reservation_id
            FROM pick
            WHERE d.id = pick.device_id AND d.reservation_id IS NULL
            RETURNING 1
        ), charged AS (
            INSERT INTO compute_quotas AS q (tenant_id, gpu_model, gpu_limit, used, updated_at)
            SELECT tenant_id, gpu_model, NULL, sum(gpu_count), p_now FROM req GROUP BY tenant_id, gpu_model
            ON CONFLICT (tenant_id, gpu_model) DO UPDATE SET used = q.used + excluded.used, updated_at = excluded.updated_at
            WHERE q.gpu_limit IS NULL OR q.used + excluded.used <= q.gpu_limit
            RETURNING 1
        )
        SELECT held.reservation_id, held.device_ids,
            cardinality(held.device_ids) <> req.gpu_count AS short,
            (SELECT count(*) FROM booked) AS booked,
            (SELECT count(*) FROM claimed) AS claimed,
            (SELECT count(*) FROM charged) AS charged
        FROM held JOIN req ON req.id = held.reservation_id
    LOOP
        out_reservation_id := r.reservation_id;
        out_device_ids := r.device_ids;
        RETURN NEXT;
        written := written + 1;
        short := short OR r.short;
        booked_n := r.booked;
        claimed_n := r.claimed;
        charged_n := r.charged;
    END LOOP;
    IF short OR written <> cardinality(p_ids) OR booked_n <> cardinality(p_ids)
        OR claimed_n <> (SELECT sum(n) FROM unnest(p_counts) n)
        OR charged_n <> (SELECT count(*) FROM (SELECT DISTINCT t, m FROM unnest(p_tenants, p_models) AS c (t, m)) g)
    THEN
        RAISE EXCEPTION 'booking contended: a device, node or quota changed' USING ERRCODE = 'serialization_failure';
    END IF;
END
$fn$
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION compute_book_batch")
