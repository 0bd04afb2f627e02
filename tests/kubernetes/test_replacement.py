"""The choice of failing machines to replace (kubernetes/replacement.py): bookings wait, the hour's limit holds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from better_compute.compute import Device
from better_compute.kubernetes.replacement import PER_HOUR, WINDOW, Failing, choose, described, needing_reset

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def names(failing: tuple[Failing, ...]) -> list[str]:
    return [f.name for f in failing]


def test_a_free_failing_node_is_replaced_and_a_booked_one_waits_for_its_bookings() -> None:
    chosen = choose([Failing("n-2", "GPU-b (gpu-lost)", bookings=1), Failing("n-1", "GPU-a (xid 79)")], [], NOW)
    assert names(chosen.now) == ["n-1"]
    assert names(chosen.booked) == ["n-2"]
    assert chosen.limited == () and chosen.next_allowed_at is None


def test_a_pool_of_one_node_has_its_node_replaced() -> None:
    assert names(choose([Failing("only", "GPU-a (gpu-lost)")], [], NOW).now) == ["only"]


def test_at_most_per_hour_replacements_in_any_hour_and_when_the_next_may_go() -> None:
    failing = [Failing(f"n-{i}", "GPU (gpu-lost)") for i in range(4)]
    earlier = NOW - timedelta(minutes=50)
    chosen = choose(failing, [earlier], NOW)
    assert PER_HOUR == 2
    assert names(chosen.now) == ["n-0"], "one earlier in the hour: room for one more"
    assert names(chosen.limited) == ["n-1", "n-2", "n-3"]
    assert chosen.next_allowed_at == earlier + WINDOW, "when the earlier one is an hour old"
    full = choose(failing, [earlier, NOW - timedelta(minutes=5)], NOW)
    assert full.now == () and full.next_allowed_at == earlier + WINDOW
    later = choose(failing, [earlier, NOW - timedelta(minutes=5)], earlier + WINDOW)
    assert names(later.now) == ["n-0"], "exactly an hour after, it has left the window"


def test_two_at_once_when_the_hour_is_empty_and_the_next_after_an_hour() -> None:
    chosen = choose([Failing(f"n-{i}", "GPU (gpu-lost)") for i in range(3)], [NOW - timedelta(hours=2)], NOW)
    assert names(chosen.now) == ["n-0", "n-1"] and names(chosen.limited) == ["n-2"]
    assert chosen.next_allowed_at == NOW + WINDOW


def gpu(index: int, state: str, reason: str | None = None, xid: int | None = None) -> Device:
    return Device(f"d{index}", "n", index, f"GPU-{index}", "H100", True, None, reason, xid, state)  # type: ignore[arg-type]


def test_only_gpus_held_for_a_reset_make_a_machine_failing_and_each_is_named_with_its_fault() -> None:
    gpus = [
        gpu(0, "healthy"),
        gpu(1, "reset-needed", "gpu-lost", 79),
        gpu(2, "unhealthy", "double-bit-ecc"),  # comes back by itself: no replacement
        gpu(3, "rechecking"),
        gpu(4, "reset-needed", "pending-remap"),
    ]
    sick = needing_reset(gpus)
    assert [d.index for d in sick] == [1, 4]
    assert described(sick) == "GPU GPU-1 (gpu-lost, XID 79), GPU GPU-4 (pending-remap)"
