"""better_compute(): options and modules in, a Compute out."""
