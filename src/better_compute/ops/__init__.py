"""The operator's reads and management, shared by the CLI and the HTTP API.

Each function takes the Compute and the tenant it acts for, calls the services, and
returns JSON-ready views (camelCase keys, ISO times), so `better-compute X list
--json` and `GET /v1/X` print the same objects. One file per group: a new group
is one file here, one in cli/ and one in api/, each registered with one line. No view ever carries a secret value, an API key after
its creation, or a join token's value.
"""

from better_compute.ops import (
    api_keys,
    clusters,
    events,
    join_tokens,
    nodes,
    pools,
    reservations,
    secrets,
    tenants,
)

__all__ = ["api_keys", "clusters", "events", "join_tokens", "nodes", "pools", "reservations", "secrets", "tenants"]
