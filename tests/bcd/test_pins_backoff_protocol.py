"""Pins, backoff and the wire protocol's limits."""

from __future__ import annotations

import base64
import hashlib
import random

import pydantic
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from better_compute.bcd.agent import RECONNECT
from better_compute.bcd.join import JOIN_RETRY
from better_compute.bcd.pins import PinMismatchError, check_pins, normalize_pin, spki_pin
from better_compute.engine import DELETE_BACKOFF
from better_compute.wire.protocol import (
    MAX_MESSAGE_BYTES,
    Heartbeat,
    Hello,
    parse_client_message,
    parse_server_message,
)


def test_spki_pin_is_the_sha256_of_the_public_key_in_pem_and_der() -> None:
    cert = trustme.CA().issue_cert("gateway.example")
    pem = cert.cert_chain_pems[0].bytes()
    parsed = x509.load_pem_x509_certificate(pem)
    spki = parsed.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    expected = "sha256/" + base64.b64encode(hashlib.sha256(spki).digest()).decode()
    assert spki_pin(pem) == expected == spki_pin(parsed.public_bytes(Encoding.DER))
    der = parsed.public_bytes(Encoding.DER)
    assert check_pins(der, (expected.replace("sha256/", "sha256//"),), where="wss://gw") == expected
    other = spki_pin(trustme.CA().issue_cert("gateway.example").cert_chain_pems[0].bytes())
    with pytest.raises(PinMismatchError, match="certificate pin mismatch for wss://gw"):
        check_pins(der, (other,), where="wss://gw")
    with pytest.raises(PinMismatchError, match="presented no certificate"):
        check_pins(None, (expected,), where="wss://gw")


def test_a_digest_whose_base64_starts_with_a_slash_is_read_in_both_forms() -> None:
    digest = bytes([0xFC]) + bytes(31)  # base64 "/A..."
    ours = "sha256/" + base64.b64encode(digest).decode()
    assert ours.startswith("sha256//")
    assert normalize_pin(ours) == ours
    assert normalize_pin("sha256//" + base64.b64encode(digest).decode()) == ours  # curl's sha256//<base64>


@pytest.mark.parametrize("pin", ["sha256/short", "md5/" + "A" * 44, "not base64 !"])
def test_a_malformed_pin_is_refused(pin: str) -> None:
    with pytest.raises(ValueError, match="not sha256/"):
        normalize_pin(pin)


def test_backoff_grows_with_jitter_up_to_the_cap_and_starts_over() -> None:
    """bcd's reconnects and joins use the engine's one schedule class, jittered."""
    assert type(RECONNECT) is type(JOIN_RETRY) is type(DELETE_BACKOFF)
    rng = random.Random(7)
    delays = [RECONNECT.jittered(failures, rng) for failures in range(1, 11)]
    for n, delay in enumerate(delays):
        ceiling = min(60.0, 2.0**n)
        assert ceiling / 2 <= delay <= ceiling
    assert len({round(d, 6) for d in delays[6:]}) == 4  # capped, yet jittered: never in step
    assert 0.5 <= RECONNECT.jittered(1, rng) <= 1.0  # a welcome starts the count over
    assert [JOIN_RETRY.delay(n) for n in (1, 2, 3, 4, 5)] == [2.0, 4.0, 8.0, 16.0, 30.0]


def test_messages_are_validated_and_size_limited() -> None:
    assert parse_client_message('{"type":"heartbeat","seq":3}') == Heartbeat(seq=3)
    with pytest.raises(pydantic.ValidationError):
        parse_client_message('{"type":"heartbeat","seq":3,"extra":1}')
    with pytest.raises(pydantic.ValidationError):
        parse_server_message('{"type":"hello"}')
    with pytest.raises(ValueError, match="over the limit"):
        parse_client_message('{"type":"heartbeat","seq":1,"x":"' + "a" * MAX_MESSAGE_BYTES + '"}')
    hello = Hello.model_validate(
        {"credential": "bcn_" + "c" * 20, "inventory": {"os": {"hostname": "h", "kubernetesNodeName": "n"}}}
    )
    assert '"kubernetesNodeName":"n"' in hello.to_wire()
