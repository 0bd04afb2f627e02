"""The retry schedules are data; their delays match the spec exactly."""

from __future__ import annotations

import pytest

from better_compute.engine.schedules import ADOPT_RETRY, DEFAULT_ERROR_BACKOFF, DELETE_BACKOFF, SCHEDULES, schedule


def test_delete_backoff_doubles_from_five_minutes_up_to_six_hours() -> None:
    minutes = [DELETE_BACKOFF.delay(n) / 60 for n in range(1, 11)]
    assert minutes == [5, 10, 20, 40, 80, 160, 320, 360, 360, 360]


def test_adopt_retry_is_a_fixed_two_minutes() -> None:
    assert [ADOPT_RETRY.delay(n) for n in (1, 2, 7, 100)] == [120, 120, 120, 120]


def test_default_backoff_grows_and_is_capped() -> None:
    assert [DEFAULT_ERROR_BACKOFF.delay(n) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert DEFAULT_ERROR_BACKOFF.delay(10_000) == 300


def test_schedules_form_one_table_looked_up_by_name() -> None:
    assert set(SCHEDULES) == {"default", "delete", "adopt"}
    assert schedule("delete") is DELETE_BACKOFF
    with pytest.raises(ValueError, match="unknown backoff schedule"):
        schedule("sometimes")
    with pytest.raises(ValueError):
        DELETE_BACKOFF.delay(0)
