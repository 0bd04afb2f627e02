"""`bcd run` as an object: the gateway agent and the device plugin over one NodeState.

The CLI builds one from the environment; the kubelet simulator builds one per simulated
node (its own state directory, kubelet socket and simulated GPUs) on the shared clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Coroutine
from typing import Any

from better_compute.bcd.agent import Agent
from better_compute.bcd.config import BcdConfig
from better_compute.bcd.credentials import CredentialStore
from better_compute.bcd.deviceplugin import DevicePlugin
from better_compute.bcd.health import HealthWatch, nvml_module
from better_compute.bcd.inventory import await_inventory, read_inventory
from better_compute.bcd.join import join
from better_compute.bcd.recheck import HoldFile
from better_compute.bcd.runtime_config import refuse_unprivileged_env
from better_compute.bcd.state import NodeState
from better_compute.core.clock import Clock
from better_compute.wire.protocol import GpuHealth, Inventory

__all__ = ["Bcd", "NotJoinedError", "join_and_run"]

log = logging.getLogger(__name__)


class NotJoinedError(Exception):
    """`bcd run` found no node credential: `bcd join` has not run on this node's volume."""


class Bcd:
    """One node's daemon: `agent` keeps the gateway session, `plugin` serves the kubelet."""

    def __init__(
        self,
        config: BcdConfig,
        *,
        clock: Clock,
        inventory: Inventory | None = None,
        rng: random.Random | None = None,
        nvml: Any | None = None,
    ) -> None:
        """`nvml` replaces the NVML bcd watches health through (pynvml, or the stand-in BCD_SIMULATED_GPUS gives)."""
        credential = CredentialStore(config.state_dir).load()
        if credential is None:
            raise NotJoinedError(
                f"no node credential in {config.state_dir}: run `bcd join` first (the DaemonSet's join container)"
            )
        env = config.env or os.environ
        self.inventory = inventory or read_inventory(env)
        nvml = nvml if nvml is not None else nvml_module(env, self.inventory.os.hostname)
        self.health = (
            HealthWatch(
                nvml,
                clock=clock,
                clean_seconds=config.health_clean_seconds,
                holds=HoldFile.in_state_dir(config.state_dir),
            )
            if nvml is not None and self.inventory.gpus
            else None
        )
        self.state = NodeState([gpu.uuid for gpu in self.inventory.gpus])
        self.agent = Agent(config, credential, self.inventory, self.state, clock=clock, rng=rng)
        self.plugin = DevicePlugin(
            self.state,
            kubelet_socket=config.kubelet_socket,
            resource_name=config.resource_name,
            indexes={gpu.uuid: gpu.index for gpu in self.inventory.gpus},
            driver_dir=config.host_driver_dir,
            on_competitors=self._competitors,
        )
        self.config = config
        self.clock = clock

    async def _competitors(self, plugins: list[str]) -> None:
        """Another device plugin came or went: the inventory says so, now and at every later hello."""
        self.inventory = self.inventory.model_copy(update={"competing_device_plugins": plugins})
        await self.agent.report(self.inventory)

    async def _health_changed(self, health: dict[str, GpuHealth]) -> None:
        """A GPU's health changed: the kubelet is told at once (ListAndWatch), and so is the gateway."""
        gpus = [gpu.model_copy(update={"health": health.get(gpu.uuid, gpu.health)}) for gpu in self.inventory.gpus]
        self.inventory = self.inventory.model_copy(update={"gpus": gpus})
        await self.state.set_unhealthy(gpu.uuid for gpu in gpus if not gpu.health.healthy)
        await self.agent.report(self.inventory)

    async def run(self, *, device_plugin: bool = True) -> None:
        """Until cancelled, or until a part fails for good (CredentialRefusedError, a refused registration).

        Before the device plugin serves, the node's NVIDIA runtime is told to ignore unprivileged
        containers' own NVIDIA_VISIBLE_DEVICES (`BCD_NVIDIA_RUNTIME_CONFIG`; bcd/runtime_config.py).

        The first failure is raised as itself, not wrapped in an exception group. Being stopped
        stays a stop: a part that fails on its way out (its session already gone, say) is logged,
        and whoever stopped bcd sees it stopped, not crashed.
        """
        if device_plugin and self.config.runtime_config is not None:
            refuse_unprivileged_env(self.config.runtime_config)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_stopping_quietly("the gateway session", self.agent.run()), name="bcd:gateway")
                if self.health is not None:
                    watch = self.health.watch(
                        self.clock, self._health_changed, check_seconds=self.config.health_seconds
                    )
                    group.create_task(_stopping_quietly("the GPU health watch", watch), name="bcd:health")
                if device_plugin:
                    plugin = _stopping_quietly("the device plugin", self.plugin.serve(self.clock))
                    group.create_task(plugin, name="bcd:device-plugin")
        except* Exception as failures:
            raise failures.exceptions[0] from None


async def _stopping_quietly(part: str, running: Coroutine[Any, Any, None]) -> None:
    """Run one part of bcd; if it fails while being cancelled, log that and go on cancelling."""
    try:
        await running
    except Exception as exc:
        task = asyncio.current_task()
        if task is None or not task.cancelling():
            raise
        log.warning("bcd is stopping; %s failed on its way out: %s: %s", part, type(exc).__name__, exc)
        raise asyncio.CancelledError from exc


async def join_and_run(config: BcdConfig, *, clock: Clock, rng: random.Random | None = None) -> None:
    """What bcd's pod does: the join container (`bcd join`), then the main one (`bcd run`).

    The inventory comes from `config.env` (NODE_NAME, BCD_SIMULATED_GPUS, BCD_HOSTNAME), so
    the kubelet simulator runs a node's bcd from the environment its DaemonSet pod gets.
    """
    inventory = await await_inventory(config.env or os.environ, clock)
    await join(config, inventory, clock=clock, rng=rng)
    await Bcd(config, clock=clock, inventory=inventory, rng=rng).run()
