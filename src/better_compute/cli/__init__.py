"""Command-line interfaces: `better-compute` and its subcommands."""
