"""Secret values never reach a log line.

Every value the system knows to be secret (a credential, a join token, a resolved
secret, an API key) is registered with `redact_value`. A logging filter on the root
handlers replaces registered values, bearer tokens and well-known token shapes with
`[REDACTED]` in the message and its arguments.

The registered values are bounded and cheap to scan for. Code registers a secret each
time it uses one (a resolve, a minted credential), so the set is kept as a
least-recently-registered cache of `CAPACITY` values: a value is forgotten only after
that many others were registered since it was last used, and the ones that live as
long as the process (the server secrets) are pinned and never forgotten. A line is
matched against all of them in one pass: every value is indexed by its first
`MIN_LENGTH` characters, and the line's own windows of that length are looked up in the
index, so a line costs the same whether 10 or 20,000 values are known. (A regular
expression alternation of the values would be one matcher too, but Python takes
seconds to compile one of 20,000 literals, and it must be rebuilt on every change.)
"""

from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict

from better_compute.core.errors import escaped

__all__ = ["CAPACITY", "REDACTED", "RedactingFilter", "Redactor", "install_redaction", "redact", "redact_value"]

REDACTED = "[REDACTED]"
MIN_LENGTH = 6
"""Shorter values are not registered: they would redact ordinary words."""
CAPACITY = 16_384
"""How many unpinned values are remembered, the most recently registered."""

_PATTERNS = [
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"k8s-aws-v1\.[A-Za-z0-9_-]+"),
    re.compile(r"(bcj|bck|bcn|bcs)_[A-Za-z0-9_-]{16,}"),
    re.compile(r"(?i)(\"?(?:token|password|secret|credential)s?\"?\s*[:=]\s*\"?)[^\s\",}]{8,}"),
]


class Redactor:
    """The registered values, bounded, and the one-pass search for them in a text."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._recent: OrderedDict[str, None] = OrderedDict()
        self._pinned: set[str] = set()
        self._index: dict[str, set[str]] = {}
        """The first MIN_LENGTH characters of each value -> the values that start so."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._recent.keys() | self._pinned)

    def __contains__(self, value: object) -> bool:
        with self._lock:
            return value in self._recent or value in self._pinned

    def add(self, value: str, *, pinned: bool = False) -> None:
        if len(value) < MIN_LENGTH:
            return
        with self._lock:
            if pinned:
                self._pinned.add(value)
                self._recent.pop(value, None)
            elif value not in self._pinned:
                self._recent[value] = None
                self._recent.move_to_end(value)
                while len(self._recent) > self.capacity:
                    self._forget(self._recent.popitem(last=False)[0])
            self._index.setdefault(value[:MIN_LENGTH], set()).add(value)

    def _forget(self, value: str) -> None:
        starting = self._index[value[:MIN_LENGTH]]
        starting.discard(value)
        if not starting:
            del self._index[value[:MIN_LENGTH]]

    def redact(self, text: str) -> str:
        if len(text) >= MIN_LENGTH and self._index:
            windows = {text[i : i + MIN_LENGTH] for i in range(len(text) - MIN_LENGTH + 1)}
            with self._lock:
                found = [value for start in windows & self._index.keys() for value in self._index[start]]
            for value in sorted(found, key=len, reverse=True):  # the longest first: a value may contain another
                text = text.replace(value, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() and m.group(1) else "") + REDACTED, text)
        return text


_redactor = Redactor()


def redact_value(value: str, *, pinned: bool = False) -> None:
    """Remember a secret value so that no log line shows it; register it again each time it is
    used. `pinned` values (held for the life of the process) are never forgotten."""
    _redactor.add(value, pinned=pinned)


def redact(text: str) -> str:
    return _redactor.redact(text)


class RedactingFilter(logging.Filter):
    """Rewrites each record's rendered message with secrets removed and lone surrogates escaped."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is still logged, redacted as a string
            message = str(record.msg)
        record.msg = escaped(redact(message))  # a lone surrogate from input would make the line unwritable
        record.args = None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = escaped(redact(logging.Formatter().formatException(record.exc_info)))
        return True


def install_redaction(logger: logging.Logger | None = None) -> None:
    """Attach the filter to every handler of `logger` (the root by default)."""
    target = logger or logging.getLogger()
    for handler in target.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
