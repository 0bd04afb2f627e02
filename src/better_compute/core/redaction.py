"""Secret values never reach a log line.

Every value the system knows to be secret (a credential, a join token, a resolved
secret, an API key) is registered with `redact_value`. A logging filter on the root
handlers replaces registered values, bearer tokens and well-known token shapes with
`[REDACTED]` in the message and its arguments.
"""

from __future__ import annotations

import logging
import re
import threading

__all__ = ["REDACTED", "RedactingFilter", "install_redaction", "redact", "redact_value"]

REDACTED = "[REDACTED]"
_PATTERNS = [
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"k8s-aws-v1\.[A-Za-z0-9_-]+"),
    re.compile(r"(bcj|bck|bcn|bcs)_[A-Za-z0-9_-]{16,}"),
    re.compile(r"(?i)(\"?(?:token|password|secret|credential)s?\"?\s*[:=]\s*\"?)[^\s\",}]{8,}"),
]
_values: set[str] = set()
_lock = threading.Lock()


def redact_value(value: str) -> None:
    """Remember a secret value so that no log line ever shows it."""
    if len(value) >= 6:
        with _lock:
            _values.add(value)


def redact(text: str) -> str:
    with _lock:
        values = sorted(_values, key=len, reverse=True)
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() and m.group(1) else "") + REDACTED, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites each record's rendered message with secrets removed."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is still logged, redacted as a string
            message = str(record.msg)
        record.msg = redact(message)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Attach the filter to every handler of `logger` (the root by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
