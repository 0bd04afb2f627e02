"""The e2e fixtures live in e2e_world.py (a module name of its own: several test folders have a conftest)."""

from e2e_world import world

__all__ = ["world"]
