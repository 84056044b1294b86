"""Dagster definitions, one asset (and its checks) per module; loaded by ``ratchet_assets.definitions``."""
