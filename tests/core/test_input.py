"""The input boundary (core/input.py): every way a document can be unacceptable is INVALID_INPUT with a place,
and any bytes at all give a value or that error, never another exception."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.input import DOCUMENT, FRAME, QUOTE, check_value, decode_json, read_limited

POINTER = re.compile(r"^(/([^~/]|~[01])*)*$")


def _refused(raw: bytes | str, **kwargs: Any) -> ComputeError:
    with pytest.raises(ComputeError) as caught:
        decode_json(raw, **kwargs)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    return caught.value


def _where(error: ComputeError) -> list[str]:
    return [p.path for p in error.problems] or [str(error.path)]


@pytest.mark.parametrize(
    ("raw", "path", "words"),
    [
        (b'{"a": "\xff"}', "", "not UTF-8"),
        ('{"a": 1}'.encode("utf-16"), "", "not UTF-8"),
        (b'{"config": {"x": "\\ud800"}}', "/config/x", "lone UTF-16 surrogate"),
        (b'{"config": {"\\udfff": 1}}', "/config/\\udfff", "lone UTF-16 surrogate"),  # escaped: encodable
        (b'{"hostname": "a\\u0000b"}', "/hostname", "NUL"),
        (b'{"n": NaN}', "/n", "NaN is not a JSON number"),
        (b'{"n": [Infinity]}', "/n/0", "Infinity is not a JSON number"),
        (b'{"n": -Infinity}', "/n", "-Infinity is not a JSON number"),
        (b'{"n": 1e999}', "/n", "out of a number's range"),
        (b'{"n": ' + b"9" * 4301 + b"}", "/n", "at most 32 characters"),
        (b"[" * 50 + b"]" * 50, "/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0", "deeper than 32"),
        (b"[" * 100_000 + b"]" * 100_000, "", "deeper than 32"),
        (b'{"s": "' + b"x" * 70_000 + b'"}', "/s", "at most 65536 characters"),
        (b"[" + b"0," * 10_000 + b"0]", "", "at most 10000 entries"),
    ],
)
def test_each_unacceptable_input_is_refused_at_its_place(raw: bytes, path: str, words: str) -> None:
    error = _refused(raw)
    assert _where(error)[0] == path
    assert words in (error.problems[0].message if error.problems else error.message)


def test_a_message_quotes_only_a_short_prefix_of_the_value() -> None:
    error = _refused(b'{"big": "' + b"\\u0000" + b"y" * 60_000 + b'"}')
    assert error.problems[0].path == "/big"
    assert len(json.dumps(error.to_dict())) < 400
    assert "y" * (QUOTE + 1) not in json.dumps(error.to_dict())


def test_a_body_over_the_byte_limit_is_refused_before_it_is_parsed() -> None:
    error = _refused(b" " * (FRAME.max_bytes + 1), limits=FRAME, what="a frame")
    assert error.message == f"a frame is at most {FRAME.max_bytes} bytes, not {FRAME.max_bytes + 1}"


async def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_limit() -> None:
    pulled = []

    async def chunks() -> Any:
        for index in range(1_000):
            pulled.append(index)
            yield b"x" * 1024

    with pytest.raises(ComputeError) as caught:
        await read_limited(chunks(), 4 * 1024)
    assert caught.value.code is ErrorCode.INVALID_INPUT
    assert len(pulled) == 5, "reading stopped at the first chunk past the limit"


def test_python_values_are_held_to_the_same_rules() -> None:
    with pytest.raises(ComputeError) as caught:
        check_value({"config": {"a": float("nan"), "b": "\ud800", "c": {1: 2}, "d": 10**5000}})
    assert sorted(p.path for p in caught.value.problems) == ["/config/a", "/config/b", "/config/c", "/config/d"]
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ComputeError):
        check_value(deep)


def test_acceptable_documents_pass_unchanged() -> None:
    text = '{"version": 1, "sites": [{"name": "k8s", "region": "tor1", "n": -12.5e3, "ok": true, "x": null}]}'
    assert decode_json(text) == json.loads(text)
    assert decode_json(text.encode()) == json.loads(text)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=5), inner, max_size=4)),
    max_leaves=20,
)


@st.composite
def damaged_json(draw: st.DrawFn) -> bytes:
    """A serialised JSON value with a few bytes put in somewhere: mostly almost-JSON."""
    raw = json.dumps(draw(json_values)).encode("utf-8", "surrogatepass")
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=3)) + raw[at:]
    return raw


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=200), damaged_json()))
def test_any_bytes_give_a_value_or_invalid_input_with_a_pointer(raw: bytes) -> None:
    try:
        value = decode_json(raw, limits=DOCUMENT)
    except ComputeError as error:
        event("refused")
        assert error.code is ErrorCode.INVALID_INPUT
        assert all(POINTER.match(p) for p in _where(error) if p)
        return
    event("accepted")
    json.dumps(value, allow_nan=False).encode("utf-8")  # storable: finite numbers, no surrogates


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_serialised_json_value_gives_the_value_or_invalid_input(value: Any) -> None:
    raw = json.dumps(value).encode("utf-8", "surrogatepass")
    try:
        decoded = decode_json(raw)
    except ComputeError as error:
        assert error.code is ErrorCode.INVALID_INPUT and error.problems
        return
    assert json.dumps(decoded, sort_keys=True) == json.dumps(json.loads(raw), sort_keys=True)
