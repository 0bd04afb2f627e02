"""The one input boundary: bytes from a file, stdin, an HTTP body or a WebSocket frame
become a JSON value here, or a ComputeError INVALID_INPUT whose problems name the place.

    decode_json(raw, limits=DOCUMENT)   bytes or text -> a checked JSON value
    check_value(value, limits=DOCUMENT) a value already in Python (the Python API's documents)
    read_limited(chunks, max_bytes)     an async body read chunk by chunk, refused past max_bytes

Refused, each at a JSON pointer: bytes that are not UTF-8, a lone UTF-16 surrogate, NUL
in a string or a key, NaN and Infinity, nesting past `max_depth`, a number literal past
`max_number_chars` characters (or out of a float's range), a string past `max_string`
characters, an array or object past `max_items` entries. The limits are documented in
docs/input-limits.md. A message quotes at most `QUOTE` characters of the offending value,
so a 2 MB field never comes back as a 2 MB error.

Why here and not in each door: every value that passes this boundary is storable and
hashable on SQLite and PostgreSQL alike (text without NUL or surrogates, finite numbers),
so the CLI, the HTTP API, the gateway and the Python API refuse the same inputs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from better_compute.core.errors import ComputeError, ErrorCode, Problem

__all__ = [
    "DOCUMENT",
    "FRAME",
    "QUOTE",
    "TOO_LARGE",
    "InputLimits",
    "check_value",
    "decode_json",
    "quote",
    "read_limited",
]

TOO_LARGE = "too-large"
"""The `reason` of an input refused for its size: the HTTP API answers it 413, not 400."""

QUOTE = 32
"""The most characters of a refused value an error message repeats."""

MAX_PROBLEMS = 20
"""An input with more problems than this reports the first ones only."""


@dataclass(frozen=True)
class InputLimits:
    """How much one input may hold; see docs/input-limits.md for the values in force."""

    max_bytes: int
    max_depth: int = 32
    max_string: int = 65_536
    max_items: int = 10_000
    max_number_chars: int = 32


DOCUMENT = InputLimits(max_bytes=8 * 1024 * 1024)
"""A FleetConfig document, a saved plan, an HTTP request body of the API."""

FRAME = InputLimits(max_bytes=64 * 1024, max_depth=16, max_string=4096, max_items=1024)
"""A gateway frame or join request from a node (bcd's MAX_MESSAGE_BYTES)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def quote(value: object) -> str:
    """A short, printable prefix of a value, for an error message."""
    text = value if isinstance(value, str) else str(value)
    shown = text[:QUOTE].encode("unicode_escape").decode("ascii")
    return repr(shown) + ("..." if len(text) > QUOTE else "")


def _pointer(parts: tuple[str | int, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


@dataclass(frozen=True)
class _Refused:
    """A literal the parser met that no checked value may hold; the walk reports it at its place."""

    message: str


def _parse_int(limits: InputLimits) -> Any:
    def parse(literal: str) -> int | _Refused:
        if len(literal) > limits.max_number_chars:
            return _Refused(f"a number is at most {limits.max_number_chars} characters, not {quote(literal)}")
        return int(literal)

    return parse


def _parse_float(limits: InputLimits) -> Any:
    def parse(literal: str) -> float | _Refused:
        if len(literal) > limits.max_number_chars:
            return _Refused(f"a number is at most {limits.max_number_chars} characters, not {quote(literal)}")
        value = float(literal)
        if math.isinf(value):
            return _Refused(f"{quote(literal)} is out of a number's range")
        return value

    return parse


def _parse_constant(literal: str) -> _Refused:
    return _Refused(f"{literal} is not a JSON number")


def decode_json(raw: bytes | str, *, limits: InputLimits = DOCUMENT, what: str = "the input") -> Any:
    """`raw` as a JSON value that passes `check_value`, or INVALID_INPUT naming what is wrong and where."""
    size = len(raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw)
    if size > limits.max_bytes:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"{what} is at most {limits.max_bytes} bytes, not {size}", "", reason=TOO_LARGE
        )
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ComputeError(
                ErrorCode.INVALID_INPUT, f"{what} is not UTF-8 (byte {exc.start} is {raw[exc.start]:#04x})", ""
            ) from None
    else:
        text = raw
    try:
        value = json.loads(
            text,
            parse_int=_parse_int(limits),
            parse_float=_parse_float(limits),
            parse_constant=_parse_constant,
        )
    except json.JSONDecodeError as exc:
        raise ComputeError(
            ErrorCode.INVALID_INPUT, f"{what} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", ""
        ) from None
    except RecursionError:
        raise ComputeError(ErrorCode.INVALID_INPUT, f"{what} nests deeper than {limits.max_depth} levels", "") from None
    check_value(value, limits=limits)
    return value


def check_value(value: Any, *, limits: InputLimits = DOCUMENT) -> None:
    """INVALID_INPUT listing where `value` breaks the boundary's rules; returns when it keeps them all.

    Iterative, so a value nested a million levels deep is refused, never a RecursionError.
    """
    problems: list[Problem] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack and len(problems) < MAX_PROBLEMS:
        item, path = stack.pop()
        if len(path) > limits.max_depth:
            problems.append(Problem(_pointer(path), f"nests deeper than {limits.max_depth} levels"))
            continue
        if isinstance(item, _Refused):
            problems.append(Problem(_pointer(path), item.message))
        elif isinstance(item, str):
            problem = _string_problem(item, limits)
            if problem is not None:
                problems.append(Problem(_pointer(path), problem))
        elif isinstance(item, float):
            if not math.isfinite(item):
                problems.append(Problem(_pointer(path), f"{item} is not a JSON number"))
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) >= 10**limits.max_number_chars:  # never str(): Python refuses past 4300 digits
                problems.append(Problem(_pointer(path), f"a number is at most {limits.max_number_chars} digits"))
        elif isinstance(item, dict):
            if len(item) > limits.max_items:
                problems.append(Problem(_pointer(path), f"an object has at most {limits.max_items} keys"))
                continue
            for key, child in reversed(item.items()):
                if not isinstance(key, str):
                    problems.append(Problem(_pointer(path), f"a key is text, not {quote(key)}"))
                    continue
                problem = _string_problem(key, limits)
                if problem is not None:
                    problems.append(Problem(_pointer((*path, key)), f"the key {problem}"))
                    continue
                stack.append((child, (*path, key)))
        elif isinstance(item, list | tuple):
            if len(item) > limits.max_items:
                problems.append(Problem(_pointer(path), f"an array has at most {limits.max_items} entries"))
                continue
            stack.extend((child, (*path, index)) for index, child in reversed(list(enumerate(item))))
        else:
            problems.append(Problem(_pointer(path), f"{type(item).__name__} is not a JSON value"))
    if problems:
        raise ComputeError.invalid(problems)


def _string_problem(text: str, limits: InputLimits) -> str | None:
    if len(text) > limits.max_string:
        return f"is at most {limits.max_string} characters, not {len(text)}"
    if "\x00" in text:
        return f"holds a NUL character: {quote(text)}"
    if _SURROGATE.search(text):
        return f"holds a lone UTF-16 surrogate, which is not text: {quote(text)}"
    return None


async def read_limited(chunks: AsyncIterator[bytes], max_bytes: int, *, what: str = "the request body") -> bytes:
    """The chunks joined, refused (INVALID_INPUT) as soon as they pass `max_bytes`: never held whole."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > max_bytes:
            raise ComputeError(ErrorCode.INVALID_INPUT, f"{what} is at most {max_bytes} bytes", "", reason=TOO_LARGE)
        parts.append(chunk)
    return b"".join(parts)
