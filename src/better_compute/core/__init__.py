"""Core pieces every module shares: errors, ids, the clock and redaction."""
