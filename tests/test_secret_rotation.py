"""Rotating the server secret: every sealed value names its key, older secrets still open what
they sealed, and `reseal` moves everything to the newest key, once."""

from __future__ import annotations

import os

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy import select

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError
from better_compute.iam import Iam
from better_compute.secrets import Sealer, SecretRow, Secrets, parse_reference
from better_compute.store import Database

OLD = "o" * 40
NEW = "n" * 40

LEGACY_BLOB = bytes.fromhex(
    "018be1357fe4458d7cba2cc1d96cc04ad729ea8d51816f95e72471f9965879005b048b"
    "4184cb7d144250cba91d58ca03d40df22cb1174ff108af"
)
"""Sealed by the code before key ids (format 1) with OLD, for tenant `ten_legacy`, id `sec_legacy`."""


def legacy_seal(server_secret: str, tenant_id: str, secret_id: str, value: str) -> bytes:
    """Format 1, as the server wrote it before key ids: version 1, nonce, AES-GCM ciphertext."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"better-compute", info=b"sealed-secrets/v1").derive(
        server_secret.encode()
    )
    nonce = os.urandom(12)
    return b"\x01" + nonce + AESGCM(key).encrypt(nonce, value.encode(), f"{tenant_id}/{secret_id}".encode())


async def sealed_blobs(database: Database) -> dict[str, bytes]:
    async with database.session() as session:
        return {row.id: row.sealed for row in (await session.execute(select(SecretRow))).scalars()}


def test_every_sealed_value_names_the_key_that_sealed_it() -> None:
    old, rotated = Sealer(OLD), Sealer(NEW, [OLD])
    assert rotated.key_id == Sealer(NEW).key_id != old.key_id
    assert OLD not in old.key_id and len(old.key_id) == 16
    sealed = rotated.seal("ten_a", "sec_a", "value")
    assert Sealer.key_id_of(sealed) == rotated.key_id
    assert Sealer.key_id_of(old.seal("ten_a", "sec_a", "value")) == old.key_id


def test_the_newest_secret_seals_and_every_one_opens() -> None:
    by_old = Sealer(OLD).seal("ten_a", "sec_a", "sealed before the rotation")
    rotated = Sealer(NEW, [OLD])
    assert rotated.open("ten_a", "sec_a", by_old) == "sealed before the rotation"
    assert not rotated.is_current(by_old)
    by_new = rotated.seal("ten_a", "sec_a", "sealed after")
    assert rotated.is_current(by_new)
    assert Sealer(NEW).open("ten_a", "sec_a", by_new) == "sealed after"
    with pytest.raises(ComputeError, match=f"sealed with key {Sealer(OLD).key_id}, which is not among") as err:
        Sealer(NEW).open("ten_a", "sec_a", by_old)
    assert err.value.code == "INVALID_STATE" and "BC_PREVIOUS_SECRETS" in err.value.message


def test_a_value_sealed_before_key_ids_still_opens_with_its_secret_among_several() -> None:
    assert Sealer(NEW, [OLD]).open("ten_legacy", "sec_legacy", LEGACY_BLOB) == "a value sealed before key ids"
    assert Sealer.key_id_of(LEGACY_BLOB) is None and not Sealer(OLD).is_current(LEGACY_BLOB)
    with pytest.raises(ComputeError, match="does not open with this server's secrets"):
        Sealer(NEW).open("ten_legacy", "sec_legacy", LEGACY_BLOB)


def test_a_short_previous_secret_is_named_by_its_place() -> None:
    with pytest.raises(ComputeError) as err:
        Sealer(NEW, [OLD, "short"])
    assert err.value.code == "INVALID_INPUT" and err.value.path == "/previousSecrets/1"


async def test_reseal_moves_every_value_to_the_newest_key_once(database: Database, clock: SimClock) -> None:
    iam = Iam(database, clock)
    acme, globex = await iam.create_tenant("acme"), await iam.create_tenant("globex")
    before = Secrets(database, clock, OLD)
    references = {
        await before.create(acme.id, "acme-one"): "acme-one",
        await before.create(acme.id, "acme-two"): "acme-two",
        await before.create(globex.id, "globex-one"): "globex-one",
    }
    legacy = await before.create(globex.id, "placeholder")
    _, legacy_id = parse_reference(legacy)
    async with database.transaction() as session:
        row = await session.get(SecretRow, legacy_id)
        assert row is not None
        row.sealed = legacy_seal(OLD, globex.id, legacy_id, "sealed before key ids")
    references[legacy] = "sealed before key ids"

    rotated = Secrets(database, clock, NEW, [OLD])
    assert (await rotated.reseal(acme.id)).resealed == 2  # one tenant's only
    report = await rotated.reseal()
    assert (report.key_id, report.resealed, report.current, report.unreadable) == (rotated.sealer.key_id, 2, 2, ())
    assert all(rotated.sealer.is_current(blob) for blob in (await sealed_blobs(database)).values())

    again = await rotated.reseal()
    assert (again.resealed, again.current) == (0, 4)
    only_new = Secrets(database, clock, NEW)
    for reference, value in references.items():
        tenant_id, _ = parse_reference(reference)
        assert await only_new.resolve(reference, tenant_id=tenant_id) == value


async def test_reseal_names_what_no_configured_secret_opens_and_leaves_it(database: Database, clock: SimClock) -> None:
    tenant = await Iam(database, clock).create_tenant("acme")
    lost = await Secrets(database, clock, OLD).create(tenant.id, "sealed with a secret now forgotten")
    blobs = await sealed_blobs(database)
    report = await Secrets(database, clock, NEW).reseal()
    assert (report.resealed, report.unreadable) == (0, (lost,))
    assert await sealed_blobs(database) == blobs
