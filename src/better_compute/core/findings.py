"""Findings: what `self_check()` and `doctor()` report.

A finding has a stable code (`kubernetes.substrate-agent-missing`, `store.schema-outdated`),
a severity and a sentence for a person. `better-compute doctor` exits non-zero when
any finding is an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["Finding", "Severity", "has_errors"]

Severity = Literal["error", "warning", "info"]
_SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    severity: Severity
    message: str

    def __post_init__(self) -> None:
        if self.severity not in _SEVERITIES:
            raise ValueError(f"severity is one of {', '.join(_SEVERITIES)}, not {self.severity!r}")

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message}


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)
