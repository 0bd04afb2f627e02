"""FleetConfig documents: schema, validation, plan, apply, prune."""
