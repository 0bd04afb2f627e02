"""bcd, the node daemon: join, connect, inventory, device plugin."""
