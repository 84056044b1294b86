"""The demo teacher: an OpenAI-compatible server that answers the built-in workloads correctly (and anything
else with a short generic text), so the whole loop runs on one machine without a paid provider."""
