"""`bcd join`: redeem the join token once and keep the node credential.

A node that already holds a credential (on its volume) is joined: it never reads the
token again, so a restarted bcd needs none. Otherwise it reads the token from the mounted
Secret, sends it with the inventory (whose `os` section names the node) to the control
plane, and stores what comes back. On Kubernetes it also sends the pod's projected
ServiceAccount token (the identity volume), whose bound claims name the pod and its Node:
the control plane has the cluster verify it, so a node joins only under its own name. A refused
token is final and said plainly; an unreachable or busy control plane is retried with back-off a
few times, never sooner than a busy one's `Retry-After` asks.
"""

from __future__ import annotations

import logging
import random
import ssl

import httpx
import pydantic

from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import CredentialStore, NodeCredential
from better_compute.core.backoff import Backoff
from better_compute.core.clock import Clock
from better_compute.core.redaction import redact_value
from better_compute.wire.protocol import JOIN_PATH, Inventory, JoinRequest, JoinResponse

__all__ = ["JoinError", "join"]

log = logging.getLogger(__name__)

TIMEOUT = httpx.Timeout(30.0, connect=10.0)
JOIN_RETRY = Backoff("join", first=2.0, factor=2.0, cap=30.0)
"""Between half and all of 2, 4, 8 ... 30 s after each failed attempt (or what Retry-After asks)."""


class JoinError(Exception):
    """The node cannot join; the message says why and what to look at."""


def _read_token(config: BcdConfig) -> str:
    try:
        token = config.token_file.read_text().strip()
    except FileNotFoundError:
        raise JoinError(
            f"not joined yet (no credential in {config.state_dir}) and no join token at {config.token_file}: "
            "is the join Secret mounted?"
        ) from None
    if not token:
        raise JoinError(f"the join token file {config.token_file} is empty")
    redact_value(token)
    return token


def _read_identity(config: BcdConfig) -> str | None:
    """The pod's projected ServiceAccount token, when it is mounted (Kubernetes); None elsewhere."""
    try:
        token = config.identity_token_file.read_text().strip()
    except FileNotFoundError:
        log.debug("no identity token at %s: joining without one", config.identity_token_file)
        return None
    if not token:
        return None
    redact_value(token)
    return token


def _join_url(config: BcdConfig) -> str:
    """The join endpoint; plain http:// would send the token in the clear, so it needs the opt-in."""
    url = config.control_plane_url
    if not url:
        raise JoinError("no control plane URL: set BCD_CONTROL_PLANE_URL or --control-plane-url")
    if url.startswith("http://") and not config.insecure_join:
        raise JoinError(
            f"{url} is not TLS and the join token would travel in the clear; use https:// "
            "(or --insecure-join for local development)"
        )
    if not url.startswith(("http://", "https://")):
        raise JoinError(f"control plane URL {url} must start with https://")
    return url + JOIN_PATH


def _refusal(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


async def join(
    config: BcdConfig,
    inventory: Inventory,
    *,
    clock: Clock,
    attempts: int = 5,
    rng: random.Random | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> NodeCredential:
    """The node's credential: the stored one, or a new one from redeeming the token."""
    store = CredentialStore(config.state_dir)
    existing = store.load()
    if existing is not None:
        log.info("already joined as node %s of pool %s; no token needed", existing.node_id, existing.pool_id)
        return existing
    url = _join_url(config)
    request = JoinRequest(token=_read_token(config), inventory=inventory, identity_token=_read_identity(config))
    body = request.model_dump(mode="json", by_alias=True, exclude_none=True)
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(config.ca_file)) if config.ca_file else True
    chance = rng or random.Random()
    async with httpx.AsyncClient(timeout=TIMEOUT, verify=verify, transport=transport) as client:
        attempt = 0
        while True:
            attempt += 1
            asked = 0.0
            try:
                response = await client.post(url, json=body)
            except httpx.TransportError as exc:
                problem = f"cannot reach the control plane at {url}: {type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return _store(store, response)
                if response.status_code < 500 and response.status_code != 429:
                    raise JoinError(f"the control plane refused to join this node: {_refusal(response)}")
                problem = f"the control plane at {url} answered {_refusal(response)}"
                asked = _retry_after(response)
            if attempt == attempts:
                raise JoinError(problem)
            delay = max(JOIN_RETRY.jittered(attempt, chance), asked)
            log.warning("%s; trying again in %.1f s (attempt %d of %d)", problem, delay, attempt, attempts)
            await clock.sleep(delay)


def _retry_after(response: httpx.Response) -> float:
    """The seconds a busy control plane asked for in `Retry-After` (at most a minute), else 0."""
    try:
        return min(max(float(response.headers.get("retry-after", "0")), 0.0), 60.0)
    except ValueError:
        return 0.0


def _store(store: CredentialStore, response: httpx.Response) -> NodeCredential:
    try:
        answer = JoinResponse.model_validate_json(response.content)
    except pydantic.ValidationError as exc:
        raise JoinError(f"the control plane's join answer is malformed: {exc.error_count()} problem(s)") from exc
    credential = NodeCredential(node_id=answer.node_id, pool_id=answer.pool_id, credential=answer.credential)
    store.save(credential)
    log.info("joined as node %s of pool %s", credential.node_id, credential.pool_id)
    return credential
