"""Sealed secrets and secret:// references."""
