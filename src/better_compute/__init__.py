"""better-compute: a control plane for GPU pools."""
