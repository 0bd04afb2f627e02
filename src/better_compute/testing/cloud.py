"""`Cloud`: the whole simulated world in one object.

One `SimClock`, one Kubernetes API emulator serving every cluster, and the GKE,
EKS and DOKS emulators on top of it, started and stopped together:

    async with Cloud() as cloud:
        compute = better_compute(..., modules=[vps(providers=cloud.providers()), ...], clock=cloud.clock)
        ...
        await cloud.advance(300)     # five simulated minutes: clusters come up, Nodes join

`providers()` gives the three real drivers pointed at the emulators (closed with the
Cloud). A DOKS account's `token` must be a `secret://` reference whose value is
`cloud.doks_token`.

The Cloud also serves a control plane on loopback (TLS, pinned key) and runs the real
bcd in every bcd pod its clusters' kubelets start, so nodes join through the same code
that runs on a real cluster:

    compute = cloud.compute(database_url, secret)   # vps, kubernetes (bcd's agent: this Cloud) and fleet
    cloud.serve(compute)            # the control plane's HTTP API and gateway

With `Cloud(bcd_processes=K)` bcd runs in K worker processes instead
(testing/bcd_workers.py): the real join and gateway agent, without the device plugin,
on a SimClock in each worker that follows this one. This process then holds only the
control plane's ends of the sessions, which is what lets a bench join thousands of Nodes.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from better_compute.core.clock import SimClock
from better_compute.kubernetes.agent import SubstrateAgent
from better_compute.providers.aws import AwsCredentials, aws_provider
from better_compute.providers.digitalocean import digitalocean_provider
from better_compute.providers.gcp import gcp_provider
from better_compute.testing.bcd_runtime import BcdPodRuntime
from better_compute.testing.control_plane import ControlPlaneServer
from better_compute.testing.doks import DoksEmulator
from better_compute.testing.eks import EksEmulator
from better_compute.testing.gke import GkeEmulator
from better_compute.testing.kube import KubeApiServer
from better_compute.testing.lifecycle import StartStop
from better_compute.vps.provider import ProviderImpl

if TYPE_CHECKING:
    from better_compute.testing.bcd_workers import BcdWorkerRuntime

if TYPE_CHECKING:
    from better_compute.server import Compute

__all__ = ["Cloud"]


class Cloud(StartStop):
    """A SimClock, one KubeApiServer and the three provider emulators; see the module docstring."""

    def __init__(self, clock: SimClock | None = None, *, doks_token: str | None = None, bcd_processes: int = 0) -> None:
        self.clock = clock or SimClock()
        self.doks_token = doks_token or f"dop_v1_{secrets.token_hex(32)}"
        self.kube = KubeApiServer(self.clock)
        self.gke = GkeEmulator(self.clock, self.kube)
        self.eks = EksEmulator(self.clock, self.kube)
        self.doks = DoksEmulator(self.clock, self.kube, tokens=(self.doks_token,))
        self.control_plane = ControlPlaneServer()
        self.bcd_workers: BcdWorkerRuntime | None = None
        if bcd_processes:
            # imported here: the worker process runs that module as __main__
            from better_compute.testing.bcd_workers import BcdWorkerRuntime

            self.bcd_workers = BcdWorkerRuntime(self.clock, bcd_processes)
        self.bcd: BcdPodRuntime = self.bcd_workers or BcdPodRuntime(self.clock)
        self.kube.pod_runtime = self.bcd
        self._providers: list[ProviderImpl] = []
        self._started = False

    async def start(self) -> None:
        async with AsyncExitStack() as stack:
            if self.bcd_workers is not None:
                await self.bcd_workers.start()
                stack.push_async_callback(self.bcd_workers.stop)
            for server in (self.control_plane, *self._emulators()):
                await stack.enter_async_context(server)
            stack.pop_all()
        self._started = True

    async def stop(self) -> None:
        """The providers, then the emulators together, then the control plane, then bcd's workers.

        Kubernetes cancels its bcd pods before the control plane their sessions speak to stops,
        and the workers that hosted them end last. Each server's stop waits out uvicorn's 0.1 s
        shutdown grace, so the emulators stop side by side: one after another cost about 1 s a Cloud.
        """
        providers, self._providers = self._providers, []
        for provider in providers:
            await provider.aclose()
        if self._started:
            self._started = False
            results = await asyncio.gather(*(s.stop() for s in self._emulators()), return_exceptions=True)
            results += await asyncio.gather(self.control_plane.stop(), return_exceptions=True)
            if self.bcd_workers is not None:
                results += await asyncio.gather(self.bcd_workers.stop(), return_exceptions=True)
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
        self.bcd.close()

    def _emulators(self) -> tuple[StartStop, ...]:
        return (self.kube, self.gke, self.eks, self.doks)

    def substrate_agent(self, image: str = "ghcr.io/better-compute/bcd:dev") -> SubstrateAgent:
        """An agent whose bcd reaches this Cloud's control plane (its URL, pin and CA)."""
        return self.control_plane.agent(image)

    def compute(
        self,
        database: str,
        secret: str,
        *,
        providers: list[ProviderImpl] | None = None,
        modules: Sequence[Any] = (),
        **options: Any,
    ) -> Compute:
        """The product wired to this Cloud, on its clock: `modules` (a configured gateway, say), then
        the vps, kubernetes and fleet modules over `providers` (new ones when not given), substrates
        installing bcd through `substrate_agent()`. `options` go to `better_compute` (base_url, ...)."""
        from better_compute.fleet import fleet_module
        from better_compute.kubernetes import SubstrateConfig, kubernetes
        from better_compute.server import better_compute
        from better_compute.vps import vps

        providers = self.providers() if providers is None else providers
        return better_compute(
            database=database,
            secret=secret,
            clock=self.clock,
            modules=[
                *modules,
                vps(providers=providers),
                kubernetes(providers=providers, substrate=SubstrateConfig(agent=self.substrate_agent())),
                fleet_module(),
            ],
            **options,
        )

    def serve(self, compute: Any) -> None:
        """Serve `compute`'s HTTP API and node gateway at the control plane's URL."""
        from better_compute.api.app import create_app

        self.control_plane.serve(create_app(compute))

    async def settle(self) -> None:
        """Let every emulator apply what is due at the clock's now."""
        await self.gke.settle()
        await self.eks.settle()
        await self.doks.settle()

    async def advance(self, seconds: float) -> None:
        """Move simulated time forward and let the emulators catch up."""
        self.clock.advance(seconds)
        await self.settle()

    def providers(self, *, max_workers: int = 4) -> list[ProviderImpl]:
        """gcp, aws and digitalocean provider definitions whose drivers talk to the emulators."""
        gcp = gcp_provider(
            endpoint=self.gke.url, credentials=self.gke.google_credentials(), max_workers=max_workers, clock=self.clock
        )
        aws = aws_provider(
            endpoint=self.eks.url,
            credentials=AwsCredentials(self.eks.access_key_id, self.eks.secret_access_key),
            max_workers=max_workers,
            clock=self.clock,
        )
        digitalocean = digitalocean_provider(endpoint=self.doks.url, max_workers=max_workers, clock=self.clock)
        made = [gcp, aws, digitalocean]
        self._providers.extend(made)
        return made
