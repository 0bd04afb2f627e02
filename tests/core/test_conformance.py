"""The conformance runner: a fresh subject per case, each case named with pass or fail and the reason."""

from __future__ import annotations

import asyncio

import pytest

from better_compute.core.conformance import ConformanceCase, check, fail, note, require, run_conformance


async def test_each_case_gets_a_fresh_subject_and_is_reported_by_name() -> None:
    seen: list[list[int]] = []

    async def touch(subject: list[int]) -> None:
        subject.append(1)
        seen.append(subject)
        check(len(subject) == 1, f"subject was shared: {subject}")

    cases = [ConformanceCase("first", "rule one", touch), ConformanceCase("second", "rule two", touch)]
    report = await run_conformance(cases, list)

    assert [r.name for r in report.results] == ["first", "second"]
    assert report.passed and report.failures == ()
    assert seen[0] is not seen[1]
    assert report.render() == "pass first\npass second"


async def test_an_async_factory_is_awaited() -> None:
    async def factory() -> str:
        await asyncio.sleep(0)
        return "made"

    async def is_made(subject: str) -> None:
        check(subject == "made", f"got {subject!r}")

    report = await run_conformance([ConformanceCase("made", "awaited", is_made)], factory)
    assert report.passed


async def test_failures_and_exceptions_fail_with_their_reason() -> None:
    async def broken_rule(subject: object) -> None:
        check(False, "the rule is broken")

    async def missing(subject: object) -> None:
        require(None, "nothing there")

    async def raises(subject: object) -> None:
        raise RuntimeError("driver exploded")

    async def fine(subject: object) -> None:
        return None

    async def fails_outright(subject: object) -> None:
        fail("told to fail")

    cases = [
        ConformanceCase("broken", "", broken_rule),
        ConformanceCase("missing", "", missing),
        ConformanceCase("raises", "", raises),
        ConformanceCase("fine", "", fine),
        ConformanceCase("fails", "", fails_outright),
    ]
    report = await run_conformance(cases, object)

    assert not report.passed
    assert report.result("broken").reason == "the rule is broken"
    assert report.result("missing").reason == "nothing there"
    assert report.result("raises").reason == "RuntimeError: driver exploded"
    assert report.result("fine").passed and report.result("fine").reason is None
    assert report.result("fails").reason == "told to fail"
    assert [r.name for r in report.failures] == ["broken", "missing", "raises", "fails"]
    assert "FAIL raises: RuntimeError: driver exploded" in report.render()
    with pytest.raises(KeyError):
        report.result("absent")


async def test_a_factory_that_raises_fails_the_case() -> None:
    def factory() -> object:
        raise ValueError("no subject")

    async def never(subject: object) -> None:
        raise AssertionError("must not run")

    report = await run_conformance([ConformanceCase("c", "", never)], factory)
    assert report.result("c").reason == "ValueError: no subject"


async def test_cancellation_is_not_swallowed() -> None:
    async def cancelled(subject: object) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await run_conformance([ConformanceCase("c", "", cancelled)], object)


async def test_a_note_is_a_finding_that_does_not_fail_its_case() -> None:
    async def should(subject: list[int]) -> None:
        note("the subject should report a global id")

    async def must(subject: list[int]) -> None:
        note("seen before the failure")
        fail("broken")

    report = await run_conformance(
        [ConformanceCase("should", "a should", should), ConformanceCase("must", "", must)], list
    )

    assert report.result("should").passed and not report.result("must").passed
    assert report.findings == (("should", "the subject should report a global id"), ("must", "seen before the failure"))
    assert report.render() == (
        "pass should\n  note: the subject should report a global id\nFAIL must: broken\n  note: seen before the failure"
    )
    with pytest.raises(RuntimeError):
        note("outside a run")
