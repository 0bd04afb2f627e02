"""Run a list of conformance cases against fresh subjects and report each by name.

A case is a named async check of one rule that a subject (a provider driver and
its vocabulary) must keep. `run_conformance` gives every case a subject of its
own, runs it, and records pass or fail with the reason:

    report = await run_conformance(cases, subject_factory)
    report.passed            # True when every case passed
    report.failures          # the results that failed, each with its reason
    print(report.render())   # one line per case

A case fails by raising: `ConformanceFailure` (through `check`) carries a reason
written for the provider author; any other exception fails the case with the
exception's type and message as the reason. Cancellation is never swallowed.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

__all__ = [
    "CaseResult",
    "ConformanceCase",
    "ConformanceFailure",
    "Report",
    "check",
    "fail",
    "require",
    "run_conformance",
]

S = TypeVar("S")
T = TypeVar("T")


class ConformanceFailure(Exception):
    """A case found a rule broken; the message is the reason shown in the report."""


def check(condition: bool, reason: str) -> None:
    """Fail the running case with `reason` unless `condition` holds."""
    if not condition:
        raise ConformanceFailure(reason)


def fail(reason: str) -> NoReturn:
    """Fail the running case with `reason`."""
    raise ConformanceFailure(reason)


def require(value: T | None, reason: str) -> T:
    """`value`, or fail the running case with `reason` when it is None."""
    if value is None:
        raise ConformanceFailure(reason)
    return value


@dataclass(frozen=True)
class ConformanceCase(Generic[S]):
    """One rule: `name` is stable (reports and tests refer to it), `rule` says what it checks."""

    name: str
    rule: str
    run: Callable[[S], Awaitable[None]]


@dataclass(frozen=True)
class CaseResult:
    name: str
    passed: bool
    reason: str | None = None


@dataclass(frozen=True)
class Report:
    """Every case's result, in the order the cases were given."""

    results: tuple[CaseResult, ...]

    @property
    def passed(self) -> bool:
        return all(result.passed for result in self.results)

    @property
    def failures(self) -> tuple[CaseResult, ...]:
        return tuple(result for result in self.results if not result.passed)

    def result(self, name: str) -> CaseResult:
        """The result of the case called `name`; KeyError when no case had that name."""
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(name)

    def render(self) -> str:
        lines = []
        for result in self.results:
            mark = "pass" if result.passed else "FAIL"
            lines.append(f"{mark} {result.name}" + (f": {result.reason}" if result.reason else ""))
        return "\n".join(lines)


SubjectFactory = Callable[[], S | Awaitable[S]]


async def run_conformance(cases: Sequence[ConformanceCase[S]], subject_factory: SubjectFactory[S]) -> Report:
    """Run each case on a fresh subject from `subject_factory` (sync or async) and report them all."""
    results: list[CaseResult] = []
    for case in cases:
        try:
            made = subject_factory()
            subject: S = await made if inspect.isawaitable(made) else made
            await case.run(subject)
        except ConformanceFailure as failure:
            results.append(CaseResult(case.name, False, str(failure)))
        except Exception as exc:  # a case that raises fails with the exception as its reason
            results.append(CaseResult(case.name, False, f"{type(exc).__name__}: {exc}"))
        else:
            results.append(CaseResult(case.name, True))
    return Report(tuple(results))
