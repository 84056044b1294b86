"""`ratchet admin ...`: operator commands (effects, releases, erasures), one module per topic."""
