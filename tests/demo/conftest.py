"""The kept demo world lives in kept_world.py (a module name of its own: several test folders have a conftest)."""

from kept_world import kept_world

__all__ = ["kept_world"]
