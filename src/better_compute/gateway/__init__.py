"""The node gateway: the join endpoint and node connections."""
