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

What the rule says a subject *should* do, and the system copes without, is a
finding: `note(reason)` records it on the running case, which still passes.
`report.findings` lists them and `render()` shows them beside the case.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Generic, NoReturn, TypeVar

__all__ = [
    "CaseResult",
    "ConformanceCase",
    "ConformanceFailure",
    "Report",
    "check",
    "fail",
    "note",
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


_NOTES: ContextVar[list[str] | None] = ContextVar("conformance_notes", default=None)


def note(reason: str) -> None:
    """Record a finding on the running case that does not fail it (a "should" the subject misses)."""
    notes = _NOTES.get()
    if notes is None:
        raise RuntimeError("note() is called from a case that run_conformance runs")
    notes.append(reason)


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
    findings: tuple[str, ...] = ()


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

    @property
    def findings(self) -> tuple[tuple[str, str], ...]:
        """Every (case name, finding) that did not fail its case."""
        return tuple((result.name, finding) for result in self.results for finding in result.findings)

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
            lines.extend(f"  note: {finding}" for finding in result.findings)
        return "\n".join(lines)


SubjectFactory = Callable[[], S | Awaitable[S]]


async def run_conformance(cases: Sequence[ConformanceCase[S]], subject_factory: SubjectFactory[S]) -> Report:
    """Run each case on a fresh subject from `subject_factory` (sync or async) and report them all."""
    results: list[CaseResult] = []
    for case in cases:
        notes: list[str] = []
        token = _NOTES.set(notes)
        try:
            made = subject_factory()
            subject: S = await made if inspect.isawaitable(made) else made
            await case.run(subject)
        except ConformanceFailure as failure:
            results.append(CaseResult(case.name, False, str(failure), tuple(notes)))
        except Exception as exc:  # a case that raises fails with the exception as its reason
            results.append(CaseResult(case.name, False, f"{type(exc).__name__}: {exc}", tuple(notes)))
        else:
            results.append(CaseResult(case.name, True, None, tuple(notes)))
        finally:
            _NOTES.reset(token)
    return Report(tuple(results))
