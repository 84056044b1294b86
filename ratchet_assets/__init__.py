"""Ratchet's control plane: the Dagster night (traffic -> examples -> golden split -> training set -> adapter ->
certificate -> BOM, daily receipt), the effect ledger, release publishing and the admin CLI."""
