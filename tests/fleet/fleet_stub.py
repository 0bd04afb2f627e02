"""A stand-in ProviderKubernetes whose `validate_substrate` holds the spec's provider rules.

Only the vocabulary and the validation hook are implemented: FleetConfig needs
nothing else of a driver. The rules are the spec's "Provider differences":
EKS takes a region only; the accelerator must match the machine type's GPUs;
a DOKS token is a secret reference; `nodes: 0` on DOKS needs autoscaling with
minNodes 0; DOKS refuses `zones` and `diskGiB`; a Spot flavor on DOKS needs the
account's `allowSpot` and `previews`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, cast

from better_compute.core.errors import ComputeError, Problem
from better_compute.kubernetes.provider import KubernetesVocabulary, ProviderKubernetes, Quota, QuotaNeed
from better_compute.providers.aws.account import EksAccountConfig
from better_compute.providers.digitalocean.account import DoksAccountConfig
from better_compute.providers.gcp.account import GkeAccountConfig
from better_compute.vps.provider import AccountConfig, ProviderAccount, ProviderImpl

MACHINES: dict[str, dict[str, tuple[str, int] | None]] = {
    "gcp": {"a3-highgpu-8g": ("nvidia-h100-80gb", 8), "g2-standard-4": ("nvidia-l4", 1), "e2-standard-4": None},
    "aws": {"p5.48xlarge": ("nvidia-h100", 8), "g6.xlarge": ("nvidia-l4", 1), "m7i.large": None},
    "digitalocean": {
        "gpu-h100x8-640gb": ("nvidia-h100", 8),
        "gpu-h100x1-80gb": ("nvidia-h100", 1),
        "s-4vcpu-8gb": None,
    },
}

VOCABULARY = {
    "gcp": KubernetesVocabulary("gcp", "region-or-zone", True, True, True, True, "vm-hostname"),
    "aws": KubernetesVocabulary("aws", "region", True, True, True, True, "instance-dns"),
    "digitalocean": KubernetesVocabulary("digitalocean", "region", False, False, True, False, "pool-suffix"),
}

_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")


class StubKubernetes:
    """The validation hook of one provider; counts calls so tests see it was asked."""

    def __init__(self, provider: str) -> None:
        self.provider = provider
        self.vocabulary = VOCABULARY[provider]
        self.calls = 0
        self.quota: tuple[Quota, ...] | ComputeError = ()
        """What `quotas` answers (raised when an error): a test sets the provider's quota here."""
        self.asked: list[tuple[str, tuple[QuotaNeed, ...]]] = []

    async def quotas(self, account: ProviderAccount, place: str, needs: tuple[QuotaNeed, ...]) -> tuple[Quota, ...]:
        self.asked.append((place, needs))
        if isinstance(self.quota, ComputeError):
            raise self.quota
        adds = float(sum(n.count for n in needs))
        return tuple(dataclasses.replace(q, adds=adds) for q in self.quota)

    async def list_clusters(self, account: ProviderAccount) -> tuple[Any, ...]:
        """No cluster at all: the orphan sweep of a stubbed account finds nothing."""
        return ()

    def zone_count(self, account: ProviderAccount, zones: tuple[str, ...]) -> int:
        """The flavor's zones, else the account's (the real drivers add their own defaults)."""
        return len(zones) or len(account.config.get("zones") or ()) or 1

    async def validate_substrate(
        self, account: ProviderAccount, substrate: Mapping[str, Any], *, path: str
    ) -> list[Problem]:
        self.calls += 1
        problems: list[Problem] = []
        create = substrate["cluster"].get("create")
        if self.provider == "aws" and create is not None and not _REGION.match(create["location"]):
            problems.append(
                Problem(f"{path}/cluster/create/location", "EKS clusters are regional: give a region, not a zone")
            )
        if self.provider == "digitalocean" and not str(account.config.get("token", "")).startswith("secret://"):
            problems.append(Problem(f"{path}/account", "the DOKS API token must be a secret:// reference"))
        for index, flavor in enumerate(substrate["flavors"]):
            where = f"{path}/flavors/{index}"
            machine = MACHINES[self.provider].get(flavor["machineType"], ())
            if machine == ():
                problems.append(Problem(f"{where}/machineType", f"unknown machine type {flavor['machineType']!r}"))
            else:
                gpus = flavor.get("gpus")
                expected = cast("tuple[str, int] | None", machine)
                if expected is None and gpus is not None:
                    problems.append(Problem(f"{where}/gpus", "this machine type has no GPUs"))
                elif expected is not None and (gpus is None or (gpus["type"], gpus["count"]) != expected):
                    problems.append(Problem(f"{where}/gpus", f"the machine type carries {expected[1]} x {expected[0]}"))
            if self.provider == "digitalocean":
                autoscaling = flavor.get("autoscaling")
                if flavor["nodes"] == 0 and (autoscaling is None or autoscaling["minNodes"] != 0):
                    problems.append(Problem(f"{where}/nodes", "a fixed-size DOKS node pool has at least one node"))
                for key in ("zones", "diskGiB"):
                    if key in flavor:
                        problems.append(Problem(f"{where}/{key}", f"DOKS node pools take no {key}"))
                if flavor.get("spot") and not (account.config.get("allowSpot") and account.config.get("previews")):
                    problems.append(
                        Problem(f"{where}/spot", "Spot on DOKS is a preview: the account needs allowSpot and previews")
                    )
        return problems


ACCOUNT_MODELS: dict[str, type[AccountConfig]] = {
    "gcp": GkeAccountConfig,
    "aws": EksAccountConfig,
    "digitalocean": DoksAccountConfig,
}


def stub_providers(*, typed: bool = False) -> dict[str, ProviderImpl]:
    """Stub hooks; `typed` gives each the real provider's account config model."""
    return {
        name: ProviderImpl(
            name=name,
            kubernetes=cast(ProviderKubernetes, StubKubernetes(name)),
            account_config=ACCOUNT_MODELS[name] if typed else None,
        )
        for name in ("gcp", "aws", "digitalocean")
    }
