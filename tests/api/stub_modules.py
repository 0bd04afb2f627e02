"""A module (core.module's protocol) that has only what a test gives it: routes and reconcilers."""

from __future__ import annotations

from fastapi import APIRouter

from better_compute.core.findings import Finding
from better_compute.core.module import ComputeLike
from better_compute.engine import Reconciler


class StubModule:
    """Serves `self.router` and runs `self.reconciler_list`; binds, checks and finds nothing."""

    name = "stub"
    public_prefixes: tuple[str, ...] = ()

    def __init__(self, *reconcilers: Reconciler) -> None:
        self.router = APIRouter()
        self.reconciler_list = list(reconcilers)

    def bind(self, compute: ComputeLike) -> None:
        pass

    def reconcilers(self) -> list[Reconciler]:
        return self.reconciler_list

    def routers(self) -> list[APIRouter]:
        return [self.router]

    def self_check(self) -> list[Finding]:
        return []

    async def doctor(self, *, tenant_id: str | None = None) -> list[Finding]:
        return []
