"""The kit's quota case: `quotas` reads what the GPU node pool's machines would count against.

A read that a plan makes before every apply that adds machines: it answers nothing for no
machines, each quota it answers has its metric and unit, a limit and a usage of 0 or more, and
adds in proportion to the machines asked about (twice the machines, twice as much). A driver
whose provider reports no quota for them answers none, which the case notes: the plan then
cannot warn before apply.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from better_compute.core.conformance import check, note
from better_compute.kubernetes.provider import QuotaNeed

if TYPE_CHECKING:
    from better_compute.testing.conformance_kubernetes import KubernetesSubject

__all__ = ["quotas_answered"]


async def quotas_answered(s: KubernetesSubject) -> None:
    k, shape = s.kubernetes, s.gpu_node_pool
    need = QuotaNeed(shape.machine_type, max(shape.node_count, 1), accelerators=shape.accelerators)
    check(await k.quotas(s.account(), s.location, ()) == (), "quotas answers quotas for no machines at all")
    once = await k.quotas(s.account(), s.location, (need,))
    if not once:
        note(f"quotas answers no quota for {need.machine_type}: the plan cannot warn before an apply exceeds one")
    for quota in once:
        check(bool(quota.metric) and bool(quota.unit), f"a quota without its metric or unit: {quota!r}")
        check(
            quota.limit >= 0 and quota.usage >= 0,
            f"quota {quota.metric} answers limit {quota.limit} and usage {quota.usage}; neither is below 0",
        )
        check(
            quota.adds > 0,
            f"quota {quota.metric} adds {quota.adds} for {need.count} more {need.machine_type}: machines that "
            "count against a quota add to it",
        )
    twice = await k.quotas(s.account(), s.location, (replace(need, count=2 * need.count),))
    check(
        {q.metric: 2 * q.adds for q in once} == {q.metric: q.adds for q in twice},
        f"twice the {need.machine_type} machines add {[(q.metric, q.adds) for q in twice]}, not twice "
        f"{[(q.metric, q.adds) for q in once]}",
    )
