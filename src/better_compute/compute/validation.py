"""Input checks shared by the compute services: each failure names the field it is about."""

from __future__ import annotations

import re
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["check_labels", "check_name", "check_text", "invalid"]

_NAME = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
_LABEL_KEY = re.compile(r"([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
SYSTEM_PREFIXES = ("bc.dev/", "better-compute.dev/")


def invalid(path: str, message: str) -> ComputeError:
    return ComputeError(ErrorCode.INVALID_INPUT, message, path)


def check_name(value: object, path: str) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise invalid(
            path, "a name is 1 to 63 lowercase letters, digits, '.', '_' or '-', starting and ending alphanumeric"
        )
    return value


def check_text(value: object, path: str, *, max_length: int = 64, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > max_length:
        raise invalid(path, f"expected a non-empty string of at most {max_length} characters")
    return value


def check_labels(value: object, path: str, *, system: bool = False) -> dict[str, str]:
    """Kubernetes-shaped labels. User labels may not use the system prefixes; only the system sets those."""
    if not isinstance(value, dict):
        raise invalid(path, "labels are an object of string keys and string values")
    labels: dict[str, Any] = value
    for key, item in labels.items():
        where = f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise invalid(where, "a label key is an optional DNS prefix and '/', then a name of at most 63 characters")
        if not system and key.startswith(SYSTEM_PREFIXES):
            raise invalid(where, f"labels under {' and '.join(SYSTEM_PREFIXES)} are set only by the system")
        if not isinstance(item, str) or len(item) > 63:
            raise invalid(where, "a label value is a string of at most 63 characters")
    return dict(labels)
