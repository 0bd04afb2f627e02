"""compute: each tenant's list version, moved by the database itself in every transaction that writes its listed rows.

`compute_list_versions` holds one number per tenant that moves whenever a row that a tenant's pool, node
or reservation list shows changes: a pool, a node (its pool's tenant too: a pool counts its nodes), a
device (its node's tenant and its reservation's) or a reservation. Triggers move it, so no write of any
code path can forget to, and it moves in the writer's own transaction: a reader that finds the version it
cached an answer under knows no such write has committed since (ops.list_answers).

SQLite: each row's trigger upserts the version at once; SQLite's one writer at a time orders them.
PostgreSQL: each row's trigger only notes its tenants in the transaction (a transaction-local setting),
and one deferred constraint trigger moves every noted tenant's version at COMMIT, in tenant order. A
version row taken at the first write and held to the end would make a second writer of the same tenant
wait on it while holding the rows it had written (a deadlock with the first, which may need those rows);
taken last, in one order, the versions cannot deadlock with each other or with anything else.

A version row is never deleted: a reader that finds none caches nothing. Alembic's batch mode on SQLite
copies a table to alter it and drops its triggers: a later migration that does so creates them again
(tests/ops/test_list_answers.py writes every listed table raw and fails if one does not move the version).

Revision ID: compute_0008
Revises: compute_0007
"""

import sqlalchemy as sa
from alembic import op

revision = "compute_0008"
down_revision = "compute_0007"
branch_labels = None
depends_on = None

# The tenants whose lists a row of each table is part of, as SQL over OLD and NEW (NULL where there is none).
_TENANTS = {
    "compute_pools": ["{row}.tenant_id"],
    "compute_nodes": ["{row}.tenant_id", "(SELECT tenant_id FROM compute_pools WHERE id = {row}.pool_id)"],
    "compute_devices": [
        "(SELECT tenant_id FROM compute_nodes WHERE id = {row}.node_id)",
        "(SELECT tenant_id FROM compute_reservations WHERE id = {row}.reservation_id)",
    ],
    "compute_reservations": ["{row}.tenant_id"],
}
_ROWS = {"INSERT": ("NEW",), "UPDATE": ("OLD", "NEW"), "DELETE": ("OLD",)}


def _tenants(table: str, rows: tuple[str, ...]) -> list[str]:
    return [sql.format(row=row) for row in rows for sql in _TENANTS[table]]


def _sqlite_triggers() -> list[str]:
    statements = []
    for table in _TENANTS:
        for event, rows in _ROWS.items():
            tenants = " UNION ".join(f"SELECT {sql} AS tenant_id" for sql in _tenants(table, rows))
            statements.append(
                f"CREATE TRIGGER {table}_list_version_{event.lower()} AFTER {event} ON {table} BEGIN "
                f"INSERT INTO compute_list_versions (tenant_id, version) "
                f"SELECT tenant_id, 1 FROM ({tenants}) WHERE tenant_id IS NOT NULL "
                f"ON CONFLICT (tenant_id) DO UPDATE SET version = version + 1; END"
            )
    return statements


_NOTE = "better_compute.list_tenants"

_POSTGRES_FUNCTIONS = [
    f"""
CREATE FUNCTION compute_list_note(tenants text[]) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    noted text := coalesce(current_setting('{_NOTE}', true), '');
    tenant text;
BEGIN
    FOREACH tenant IN ARRAY tenants LOOP
        IF tenant IS NOT NULL AND strpos(noted, ' ' || tenant || ' ') = 0 THEN
            noted := noted || ' ' || tenant || ' ';
        END IF;
    END LOOP;
    PERFORM set_config('{_NOTE}', noted, true);
END
$fn$
""",
    f"""
CREATE FUNCTION compute_list_versions_move() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    noted text := current_setting('{_NOTE}', true);
BEGIN
    IF noted IS NULL OR noted = '' THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('{_NOTE}', '', true);
    INSERT INTO compute_list_versions AS v (tenant_id, version)
    SELECT tenant_id, 1 FROM (
        SELECT DISTINCT tenant_id FROM unnest(string_to_array(noted, ' ')) AS tenant_id WHERE tenant_id <> ''
    ) noted_tenants
    ORDER BY tenant_id
    ON CONFLICT (tenant_id) DO UPDATE SET version = v.version + 1;
    RETURN NULL;
END
$fn$
""",
]


def _postgres_triggers() -> list[str]:
    statements = []
    for table in _TENANTS:
        tenants = ", ".join(_tenants(table, ("OLD", "NEW")))  # OLD is NULL on INSERT, NEW on DELETE
        statements += [
            f"CREATE FUNCTION {table}_list_note() RETURNS trigger LANGUAGE plpgsql AS $fn$ "
            f"BEGIN PERFORM compute_list_note(ARRAY[{tenants}]::text[]); RETURN NULL; END $fn$",
            f"CREATE TRIGGER {table}_list_note AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {table}_list_note()",
            f"CREATE CONSTRAINT TRIGGER {table}_list_versions_move AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION compute_list_versions_move()",
        ]
    return statements


def upgrade() -> None:
    op.create_table(
        "compute_list_versions",
        sa.Column("tenant_id", sa.String(64), primary_key=True),
        sa.Column("version", sa.BigInteger(), nullable=False),
    )
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in _POSTGRES_FUNCTIONS + _postgres_triggers() if postgres else _sqlite_triggers():
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in _TENANTS:
        if postgres:
            op.execute(f"DROP TRIGGER {table}_list_versions_move ON {table}")
            op.execute(f"DROP TRIGGER {table}_list_note ON {table}")
            op.execute(f"DROP FUNCTION {table}_list_note()")
        else:
            for event in _ROWS:
                op.execute(f"DROP TRIGGER {table}_list_version_{event.lower()}")
    if postgres:
        op.execute("DROP FUNCTION compute_list_versions_move()")
        op.execute("DROP FUNCTION compute_list_note(text[])")
    op.drop_table("compute_list_versions")
