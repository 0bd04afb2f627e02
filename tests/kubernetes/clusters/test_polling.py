"""The clusters reconciler's poll schedule: near the provider's estimate first, then at 5 % of the age."""

from __future__ import annotations

import math

import pytest

from better_compute.kubernetes.clusters.polling import FIRST_LOOK, LATENESS, MAX_WAIT, MIN_WAIT, poll_after


def looks(estimate: float, until: float) -> list[float]:
    """The ages at which an operation is looked at, from its start until it is `until` seconds old."""
    ages, age = [], 0.0
    while age < until:
        age += poll_after(age, estimate)
        ages.append(age)
    return ages


def test_the_first_look_is_near_the_estimate() -> None:
    assert poll_after(0.0, 300.0) == pytest.approx(270.0)
    assert poll_after(100.0, 300.0) == pytest.approx(170.0)


@pytest.mark.parametrize("estimate", [120.0, 300.0, 480.0])
@pytest.mark.parametrize("actual", [1.0, 1.3, 3.0])
def test_an_operation_that_ends_after_the_first_look_is_seen_within_five_percent(
    estimate: float, actual: float
) -> None:
    ends = actual * estimate
    ages = looks(estimate, ends)
    assert ages[-1] <= max(ends * (1 + LATENESS), ends + MIN_WAIT)
    overrun = math.log(actual / FIRST_LOOK) / math.log(1 + LATENESS)
    assert len(ages) <= 2 + overrun, "the reads grow with the log of the overrun, not with its length"


def test_an_operation_on_time_costs_four_looks() -> None:
    assert len(looks(300.0, 300.0)) == 4


def test_waits_stay_within_bounds() -> None:
    assert poll_after(269.9, 300.0) == MIN_WAIT
    assert poll_after(36_000.0, 300.0) == MAX_WAIT
