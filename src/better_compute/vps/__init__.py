"""The vps module: provider definitions (ProviderImpl) and provider accounts."""
