"""kubernetes(substrate=...): the mapping form of DESIGN.md's table and SubstrateConfig both work; anything else is refused."""

from __future__ import annotations

import pytest

from better_compute.core.clock import SimClock
from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.gateway import gateway
from better_compute.gateway.joining import JoinHooks
from better_compute.kubernetes import SubstrateConfig, kubernetes
from better_compute.kubernetes.substrates.admission import admit_substrate_node, wake_on_first_session
from better_compute.kubernetes.substrates.node_identity import SubstrateNodeIdentity
from better_compute.providers.kubernetes import kubernetes_substrate_agent
from better_compute.server import better_compute
from better_compute.store import Database

AGENT = kubernetes_substrate_agent(
    image="bcd:dev",
    gateway_url="wss://gateway.example:8443",
    pins=["sha256/" + "A" * 43 + "="],
    control_plane_url="https://cp.example",
)


@pytest.mark.parametrize("substrate", [{"agent": AGENT}, SubstrateConfig(agent=AGENT)], ids=["mapping", "config"])
async def test_the_mapping_form_and_substrate_config_both_give_the_module_its_agent(
    database: Database, clock: SimClock, substrate: object
) -> None:
    module = kubernetes(substrate=substrate)  # type: ignore[arg-type]
    compute = better_compute(
        database=database.url,
        secret="s" * 40,
        base_url="http://127.0.0.1:8080",
        modules=[gateway(), module],
        clock=clock,
    )
    try:
        assert "kubernetes.substrate-agent-missing" not in {f.code for f in compute.self_check()}
        assert module.context.agent is AGENT
    finally:
        await compute.close()


def test_without_substrate_the_self_check_says_the_agent_is_missing() -> None:
    assert [f.code for f in kubernetes().self_check()] == ["kubernetes.substrate-agent-missing"]
    assert [f.code for f in kubernetes(substrate={}).self_check()] == ["kubernetes.substrate-agent-missing"]


@pytest.mark.parametrize(
    ("substrate", "path"),
    [
        ({"agent": {"image": "bcd:dev"}}, "/substrate/agent"),
        ({"agent": AGENT, "image": "bcd:dev"}, "/substrate/image"),
        (SubstrateConfig(agent="bcd:dev"), "/substrate/agent"),  # type: ignore[arg-type]
        ("bcd:dev", "/substrate"),
    ],
    ids=["agent-not-an-agent", "unknown-key", "config-with-a-string", "not-a-mapping"],
)
def test_a_substrate_that_is_neither_form_is_refused_at_construction(substrate: object, path: str) -> None:
    with pytest.raises(ComputeError) as refused:
        kubernetes(substrate=substrate)  # type: ignore[arg-type]
    assert refused.value.code is ErrorCode.INVALID_INPUT and refused.value.path == path
    assert refused.value.message.startswith("substrate")


async def test_the_module_registers_its_join_hooks_on_the_gateway_once(database: Database, clock: SimClock) -> None:
    """The gateway declares its hooks (JoinHooks, registered once): the substrate's admission,
    identity check and first-session hook reach it, and no second module replaces them unseen."""
    compute = better_compute(
        database=database.url, secret="s" * 40, modules=[gateway(), kubernetes(substrate={"agent": AGENT})], clock=clock
    )
    try:
        hooks = compute.gateway.hooks
        assert hooks.admission is admit_substrate_node and hooks.first_session is wake_on_first_session
        assert isinstance(hooks.identity, SubstrateNodeIdentity)
        with pytest.raises(ValueError, match="registered already"):
            compute.gateway.register_hooks(JoinHooks(admission=admit_substrate_node))
        assert compute.gateway.hooks is hooks
    finally:
        await compute.close()
