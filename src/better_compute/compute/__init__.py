"""Compute core: sites, pools, nodes, devices, reservations and quota."""
