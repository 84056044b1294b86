"""Ratchet's control plane: the Dagster night (traffic -> examples -> golden split -> training set -> adapter ->
certificate -> BOM, daily receipt), the effect ledger, release publishing and the admin CLI."""

# ratchet_core's environment defaults (no network unless configured: litellm's price map, the Hugging Face Hub) hold
# in every process that loads the control plane, Dagster's included, before anything imports those libraries.
import ratchet_core  # noqa: E402, F401
