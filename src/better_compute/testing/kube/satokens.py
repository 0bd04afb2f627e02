"""Service-account tokens: JWTs signed by the cluster, bound to the account (and a pod).

What the real API server's TokenRequest issues: an ES256 JWT whose claims name
the issuer, the audiences, the account (and, for a pod-bound token, the pod and
its node) by name and uid. A token is valid while its signature checks, the
clock is inside [nbf, exp), one of its audiences is wanted, and every object it
is bound to still exists with the same uid.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from better_compute.core.clock import Clock
from better_compute.testing.kube.auth import TokenReview
from better_compute.testing.kube.resources import find_kind

if TYPE_CHECKING:
    from better_compute.testing.kube.store import ObjectStore

__all__ = ["API_AUDIENCE", "ISSUER", "BoundObject", "ServiceAccountTokens"]

ISSUER = "https://kubernetes.default.svc.cluster.local"
API_AUDIENCE = ISSUER  # the API server's own audience (--api-audiences defaults to the issuer)


@dataclass(frozen=True)
class BoundObject:
    kind: str  # "pod" or "node"
    name: str
    uid: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class ServiceAccountTokens:
    """Signs and verifies one cluster's service-account JWTs."""

    def __init__(self, clock: Clock, store: ObjectStore) -> None:
        self._clock = clock
        self._store = store
        self._key = ec.generate_private_key(ec.SECP256R1())
        public = self._key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
        digest = hashes.Hash(hashes.SHA256())
        digest.update(public)
        self.key_id = _b64(digest.finalize())[:16]

    def issue(
        self,
        namespace: str,
        account: dict[str, Any],
        seconds: int,
        audiences: list[str],
        bound: tuple[BoundObject, ...] = (),
    ) -> tuple[str, datetime]:
        """A signed token for `account`; returns it and when it expires."""
        now = self._clock.now()
        expires = now + timedelta(seconds=seconds)
        private: dict[str, Any] = {
            "namespace": namespace,
            "serviceaccount": {"name": account["metadata"]["name"], "uid": account["metadata"]["uid"]},
        }
        for obj in bound:
            private[obj.kind] = {"name": obj.name, "uid": obj.uid}
        claims = {
            "aud": audiences,
            "exp": int(expires.timestamp()),
            "iat": int(now.timestamp()),
            "nbf": int(now.timestamp()),
            "iss": ISSUER,
            "jti": str(uuid.uuid4()),
            "kubernetes.io": private,
            "sub": f"system:serviceaccount:{namespace}:{account['metadata']['name']}",
        }
        header = {"alg": "ES256", "kid": self.key_id}
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        r, s = decode_dss_signature(self._key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{signing_input}.{_b64(signature)}", expires

    def jwks(self) -> dict[str, Any]:
        """`/openid/v1/jwks`: the public key that verifies this cluster's tokens."""
        numbers = self._key.public_key().public_numbers()
        key = {
            "use": "sig",
            "kty": "EC",
            "kid": self.key_id,
            "crv": "P-256",
            "alg": "ES256",
            "x": _b64(numbers.x.to_bytes(32, "big")),
            "y": _b64(numbers.y.to_bytes(32, "big")),
        }
        return {"keys": [key]}

    @staticmethod
    def openid_configuration(jwks_uri: str) -> dict[str, Any]:
        """`/.well-known/openid-configuration`, as the API server publishes it for its issuer."""
        return {
            "issuer": ISSUER,
            "jwks_uri": jwks_uri,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        }

    def review(self, token: str, audiences: list[str]) -> tuple[TokenReview, list[str]] | None:
        """Who the token is and which of `audiences` it is for, or None when it is not valid."""
        claims = self._verified_claims(token)
        if claims is None or claims.get("iss") != ISSUER:
            return None
        now = self._clock.now().timestamp()
        if not (int(claims.get("nbf", 0)) <= now < int(claims.get("exp", 0))):
            return None
        matched = [a for a in audiences if a in (claims.get("aud") or [])]
        if not matched:
            return None
        private = claims.get("kubernetes.io") or {}
        namespace = private.get("namespace", "")
        account = private.get("serviceaccount") or {}
        if not self._exists("ServiceAccount", namespace, account):
            return None
        extra: dict[str, tuple[str, ...]] = {"authentication.kubernetes.io/credential-id": (f"JTI={claims['jti']}",)}
        pod = private.get("pod")
        if pod is not None:
            if not self._exists("Pod", namespace, pod):
                return None
            extra["authentication.kubernetes.io/pod-name"] = (pod["name"],)
            extra["authentication.kubernetes.io/pod-uid"] = (pod["uid"],)
        node = private.get("node")
        if node is not None:
            if pod is None and not self._exists("Node", "", node):
                return None
            extra["authentication.kubernetes.io/node-name"] = (node["name"],)
            extra["authentication.kubernetes.io/node-uid"] = (node["uid"],)
        review = TokenReview(
            subject=f"system:serviceaccount:{namespace}:{account['name']}",
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"),
            expires_at=datetime.fromtimestamp(int(claims["exp"]), self._clock.now().tzinfo),
            uid=account["uid"],
            extra=extra,
        )
        return review, matched

    def _verified_claims(self, token: str) -> dict[str, Any] | None:
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            header = json.loads(_unb64(parts[0]))
            signature = _unb64(parts[2])
            if header.get("alg") != "ES256" or len(signature) != 64:
                return None
            der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
            self._key.public_key().verify(der, f"{parts[0]}.{parts[1]}".encode(), ec.ECDSA(hashes.SHA256()))
            claims = json.loads(_unb64(parts[1]))
        except (ValueError, InvalidSignature, UnicodeDecodeError):
            return None
        return claims if isinstance(claims, dict) else None

    def _exists(self, kind: str, namespace: str, ref: dict[str, Any]) -> bool:
        rt = find_kind("v1", kind)
        live = self._store.peek(rt, namespace, str(ref.get("name", ""))) if rt is not None else None
        return live is not None and live["metadata"]["uid"] == ref.get("uid")
