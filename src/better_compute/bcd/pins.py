"""Certificate pinning by SHA-256 of the SubjectPublicKeyInfo (SPKI), as HPKP and curl write it.

A pin is `sha256/<base64 of the digest>`; `sha256//<base64>` (curl's form) and the bare
base64 are accepted too. With pins, bcd trusts the gateway's key, not a CA: the TLS chain
is not verified, the pin is, before anything secret is sent.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = ["PinMismatchError", "check_pins", "normalize_pin", "spki_pin", "tls_context"]


class PinMismatchError(Exception):
    """The gateway's certificate matches none of the configured pins."""


def spki_pin(certificate: bytes) -> str:
    """`sha256/<base64>` of a certificate's public key; takes PEM or DER."""
    cert = (
        x509.load_pem_x509_certificate(certificate)
        if certificate.lstrip().startswith(b"-----")
        else x509.load_der_x509_certificate(certificate)
    )
    spki = cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return "sha256/" + base64.b64encode(hashlib.sha256(spki).digest()).decode()


def normalize_pin(pin: str) -> str:
    """`sha256/<base64>` (ours) or curl's `sha256//<base64>`. A digest's base64 may itself start
    with `/`, so each reading is tried and the one that decodes to 32 bytes wins."""
    value = pin.strip()
    readings = [value[len(prefix) :] for prefix in ("sha256/", "sha256//") if value.startswith(prefix)] or [value]
    for reading in readings:
        try:
            digest = base64.b64decode(reading, validate=True)
        except ValueError:
            continue
        if len(digest) == 32:
            return "sha256/" + base64.b64encode(digest).decode()
    raise ValueError(f"pin {pin!r} is not sha256/<base64 of a SHA-256 digest>")


def check_pins(der_certificate: bytes | None, pins: tuple[str, ...], *, where: str) -> str:
    """The certificate's pin if it is one of `pins`; raises PinMismatchError otherwise."""
    if der_certificate is None:
        raise PinMismatchError(f"{where} presented no certificate; pins are configured, refusing to connect")
    actual = spki_pin(der_certificate)
    expected = {normalize_pin(p) for p in pins}
    if actual not in expected:
        raise PinMismatchError(
            f"certificate pin mismatch for {where}: it presented {actual}, expected one of "
            f"{', '.join(sorted(expected))}; refusing to connect (check the pins given to the substrate agent)"
        )
    return actual


def tls_context(pins: tuple[str, ...], ca_file: Path | None) -> ssl.SSLContext:
    """With pins: trust the pinned key alone (checked after the handshake). Without: verify the chain."""
    if pins:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the SPKI pin replaces CA trust; check_pins runs before any secret
        return context
    return ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
