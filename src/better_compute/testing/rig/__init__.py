"""The split rig: the simulated world in one process, `better-compute serve` in another (world.py)."""
