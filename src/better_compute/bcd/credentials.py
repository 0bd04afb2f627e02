"""The node credential, kept on the node's volume so that a restarted bcd never needs a token.

`bcd join` writes it once (mode 0600, atomically: a crash never leaves half a file). The
temporary file is created afresh with O_EXCL, so a stale one left by a crash (whatever its
mode) is never reused and the credential is never readable by others, not even briefly;
`bcd run` and every later `bcd join` read it. Its value is registered for redaction as
soon as it is known.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from better_compute.core.redaction import redact_value

__all__ = ["CredentialStore", "NodeCredential"]

FILE_NAME = "node-credential.json"


@dataclass(frozen=True)
class NodeCredential:
    node_id: str
    pool_id: str
    credential: str

    def __repr__(self) -> str:
        return f"NodeCredential(node_id={self.node_id!r}, pool_id={self.pool_id!r}, credential=[REDACTED])"


class CredentialStore:
    """One JSON file in the state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / FILE_NAME

    def load(self) -> NodeCredential | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        credential = NodeCredential(node_id=data["nodeId"], pool_id=data["poolId"], credential=data["credential"])
        redact_value(credential.credential)
        return credential

    def save(self, credential: NodeCredential) -> None:
        redact_value(credential.credential)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps(
            {"nodeId": credential.node_id, "poolId": credential.pool_id, "credential": credential.credential}
        )
        temporary = self.path.with_suffix(".tmp")
        temporary.unlink(missing_ok=True)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
