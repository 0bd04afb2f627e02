"""The EKS provider account's `config`, as a model: the spec's keys, each typed.

A region must be one botocore knows EKS in (an unknown one is INVALID_INPUT at
`config/region`, never a call to an endpoint that does not exist), and each zone
must be an Availability Zone name of that region.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated

import botocore.session
from pydantic import AfterValidator, Field, ValidationInfo, field_validator

from better_compute.providers.aws.vocabulary import ZONE_PATTERN
from better_compute.vps.provider import AccountConfig

__all__ = ["EksAccountConfig", "eks_regions"]

RoleArn = Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]+$", max_length=600)]
SubnetId = Annotated[str, Field(pattern=r"^subnet-[0-9a-f]{8,17}$")]


@cache
def eks_regions() -> frozenset[str]:
    """Every region of every AWS partition that runs EKS, from botocore's own endpoint data."""
    session = botocore.session.get_session()
    return frozenset(
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions("eks", partition_name=partition)
    )


def _zone_of_region(zone: str, info: ValidationInfo) -> str:
    region = info.data.get("region")
    match = ZONE_PATTERN.match(zone)
    if match is None or (region is not None and match[1] != region):
        raise ValueError(f"{zone[:32]!r} is not an Availability Zone of {region or 'the region'}")
    return zone


Zone = Annotated[str, Field(max_length=32), AfterValidator(_zone_of_region)]


class EksAccountConfig(AccountConfig):
    region: Annotated[str, Field(max_length=32)]
    zones: Annotated[list[Zone], Field(min_length=1, max_length=16)]
    eksClusterRoleArn: RoleArn
    eksNodeRoleArn: RoleArn
    eksSubnetIds: Annotated[list[SubnetId], Field(min_length=1, max_length=16)]

    @field_validator("region")
    @classmethod
    def _known_region(cls, region: str) -> str:
        if region not in eks_regions():
            raise ValueError(f"{region[:32]!r} is not an AWS region that runs EKS (like us-east-1)")
        return region

    @field_validator("zones")
    @classmethod
    def _once_each(cls, zones: list[str]) -> list[str]:
        if len(set(zones)) != len(zones):
            raise ValueError("zones are listed twice")
        return zones
