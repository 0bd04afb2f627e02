"""The vps module: provider definitions (ProviderImpl) and provider accounts."""

from better_compute.vps.module import ProviderAccounts, VpsModule, vps
from better_compute.vps.provider import ProviderAccount, ProviderImpl, SecretResolver

__all__ = ["ProviderAccount", "ProviderAccounts", "ProviderImpl", "SecretResolver", "VpsModule", "vps"]
