"""`better-compute demo`: the product's story, told against the simulated world.

world.py starts the emulators and a control plane, story.py holds the steps, display.py
draws them, summary.py records what happened, keep.py serves on after `--keep`, and
run.py puts them together (`run_demo`).
"""

from better_compute.demo.display import Display
from better_compute.demo.run import run_demo
from better_compute.demo.summary import Summary
from better_compute.demo.world import default_fleet_path

__all__ = ["Display", "Summary", "default_fleet_path", "run_demo"]
