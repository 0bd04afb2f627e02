"""The redaction set stays bounded, and every value it still knows is redacted wherever it sits."""

from __future__ import annotations

import random
import string

from better_compute.core.redaction import CAPACITY, REDACTED, Redactor, redact, redact_value


def token(rng: random.Random, length: int = 24) -> str:
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(length))


def test_the_set_is_bounded_forgetting_the_least_recently_registered() -> None:
    redactor = Redactor(capacity=100)
    rng = random.Random(7)
    values = [token(rng) for _ in range(250)]
    redactor.add(values[0])
    for value in values[1:150]:
        redactor.add(value)
        redactor.add(values[0])  # used again and again: registered again each time
    for value in values[150:]:
        redactor.add(value)
    assert len(redactor) == 100
    assert values[1] not in redactor and values[149] not in redactor
    assert values[150] in redactor and values[-1] in redactor
    assert redactor.redact(f"old {values[1]}") == f"old {values[1]}"  # forgotten: its index entry too


def test_a_value_registered_again_stays_while_others_come_and_go() -> None:
    redactor = Redactor(capacity=10)
    rng = random.Random(8)
    kept = token(rng)
    redactor.add(kept)
    for _ in range(1_000):
        redactor.add(token(rng))
        redactor.add(kept)
    assert redactor.redact(f"uses {kept}.") == f"uses {REDACTED}."


def test_a_pinned_value_is_never_forgotten_nor_counted() -> None:
    redactor = Redactor(capacity=5)
    rng = random.Random(9)
    server_secret = token(rng, 48)
    redactor.add(server_secret, pinned=True)
    redactor.add(server_secret)  # registered again unpinned: still pinned
    for _ in range(100):
        redactor.add(token(rng))
    assert server_secret in redactor and len(redactor) == 6
    assert redactor.redact(f"secret={server_secret[:3]} {server_secret}") == f"secret={server_secret[:3]} {REDACTED}"


def test_every_known_value_is_redacted_wherever_it_sits_among_thousands() -> None:
    redactor = Redactor(capacity=20_000)
    rng = random.Random(10)
    values = [token(rng, rng.randint(6, 64)) for _ in range(20_000)]
    for value in values:
        redactor.add(value)
    for value in rng.sample(values, 200):
        line = f"{value}a {value} x{value}y ({value})\n\t{value}"
        assert redactor.redact(line) == f"{REDACTED}a {REDACTED} x{REDACTED}y ({REDACTED})\n\t{REDACTED}"


def test_a_value_that_contains_another_is_redacted_whole() -> None:
    redactor = Redactor()
    redactor.add("abcdef")
    redactor.add("abcdefghij-longer")
    redactor.add("xyz-abcdef-inside")
    assert redactor.redact("abcdefghij-longer abcdef xyz-abcdef-inside") == f"{REDACTED} {REDACTED} {REDACTED}"


def test_short_values_and_texts_are_left_alone() -> None:
    redactor = Redactor()
    redactor.add("abcde")
    assert len(redactor) == 0
    assert redactor.redact("abcde") == "abcde"
    redactor.add("abcdef")
    assert redactor.redact("abcd") == "abcd" and redactor.redact("abcdef") == REDACTED


def test_the_process_wide_set_is_bounded_by_default() -> None:
    rng = random.Random(11)
    first = token(rng)
    redact_value(first)
    for _ in range(CAPACITY):
        redact_value(token(rng))
    last = token(rng)
    redact_value(last)
    assert redact(f"{first} then {last}") == f"{first} then {REDACTED}"
