"""Provider drivers: gcp, aws, digitalocean, and the kubernetes substrate agent."""
