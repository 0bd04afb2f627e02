"""Per-line cost of log redaction with many registered secret values.

Measured in one run, on the same lines and the same values:

    before   the redaction as it was: every registered value (sorted longest first) searched in
             every line, an unbounded set
    after    `Redactor`: the values indexed by their first characters, one pass over the line;
             at the default capacity (16,384: the oldest of the 20,000 are forgotten) and with
             the capacity raised so that all 20,000 are kept

Each is timed on a line with no secret and on a line with one, and the result of every
variant is checked to be the same redacted line.

    python bench/redaction.py --values 20000
"""

from __future__ import annotations

import argparse
import random
import string
import time
from collections.abc import Callable

from better_compute.core.redaction import _PATTERNS, CAPACITY, REDACTED, Redactor

LINE = (
    "2026-11-30 12:00:00,123 INFO better_compute.kubernetes.substrates: substrate pool_4f2a9c of tenant "
    "ten_81bd: 3 nodes matched, 1 retired, join token rotated, DaemonSet applied (generation 7){secret}"
)


def before(values: set[str]) -> Callable[[str], str]:
    """The redaction before this change, for the baseline."""

    def redact(text: str) -> str:
        for value in sorted(values, key=len, reverse=True):
            if value in text:
                text = text.replace(value, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: (m.group(1) if m.groups() and m.group(1) else "") + REDACTED, text)
        return text

    return redact


def per_line_us(redact: Callable[[str], str], lines: list[str], seconds: float) -> float:
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for line in lines:
            redact(line)
        count += len(lines)
    return (time.perf_counter() - started) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--values", type=int, default=20_000)
    parser.add_argument("--seconds", type=float, default=3.0, help="time spent on each variant and line")
    args = parser.parse_args()
    rng = random.Random(1)
    alphabet = string.ascii_letters + string.digits + "-_"
    values = ["".join(rng.choice(alphabet) for _ in range(rng.randint(24, 64))) for _ in range(args.values)]
    at_default, keeping_all = Redactor(), Redactor(capacity=args.values)
    for value in values:
        at_default.add(value)
        keeping_all.add(value)
    recent = values[-1]
    plain, with_secret = LINE.format(secret=""), LINE.format(secret=f" with credential {recent}")
    variants = {
        "before (unbounded set, every value searched)": before(set(values)),
        f"after, capacity {CAPACITY:,}": at_default.redact,
        f"after, capacity {args.values:,}": keeping_all.redact,
    }
    expected = LINE.format(secret=f" with credential {REDACTED}")
    print(f"{args.values:,} values registered; per-line cost, microseconds")
    print(f"{'variant':<48} {'no secret':>12} {'one secret':>12}")
    for name, redact in variants.items():
        assert redact(with_secret) == expected and redact(plain) == plain, name
        no_secret = per_line_us(redact, [plain], args.seconds)
        one_secret = per_line_us(redact, [with_secret], args.seconds)
        print(f"{name:<48} {no_secret:>12.1f} {one_secret:>12.1f}")


if __name__ == "__main__":
    main()
