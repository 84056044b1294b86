"""The `ratchet` console script."""
