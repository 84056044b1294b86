"""The demo teacher: an OpenAI-compatible server that answers the built-in workloads correctly (and anything
else inside the request's own contract: declared tools, ``json_schema``, else a short generic text), so the whole
loop runs on one machine without a paid provider."""
