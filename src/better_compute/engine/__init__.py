"""The reconcile engine: leased claims, token-guarded completion, backoff, wake-ups."""
