"""The kubernetes module: managed clusters and GPU pool substrates."""
