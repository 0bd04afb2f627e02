"""The node gateway: the join endpoint and node connections.

`gateway()` is the Compute module; `Gateway` the service it attaches as
`compute.gateway`; `JoinTokens` (`compute.join_tokens`) and the session-level token
functions are what the substrate uses.
"""

from better_compute.gateway.module import GatewayModule, gateway
from better_compute.gateway.service import Gateway
from better_compute.gateway.tokens import (
    JoinToken,
    JoinTokens,
    create_join_token,
    get_join_token,
    revoke_join_token,
    set_uses_left,
)

__all__ = [
    "Gateway",
    "GatewayModule",
    "JoinToken",
    "JoinTokens",
    "create_join_token",
    "gateway",
    "get_join_token",
    "revoke_join_token",
    "set_uses_left",
]
