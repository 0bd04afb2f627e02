"""What bcd and the node gateway both speak (`wire.protocol`); it imports nothing of ours but core."""
