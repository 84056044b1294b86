"""`ratchet demo`'s parts: a process supervisor (children in their own process groups, readiness with deadlines),
the demo's state and accelerated clock (so a second run resumes), the night runner (the ``nightly`` job of the
Dagster code location in the shared ``DAGSTER_HOME``) and the day loop that ties them together."""
