"""Small modules shared by the data plane (ratchet_gateway) and the control plane (ratchet_assets).

Nothing here imports Dagster, FastAPI or torch at import time: settings, row schemas, the release-manifest
format and the built-in workloads.
"""
