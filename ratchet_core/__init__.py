"""Small modules shared by the data plane (ratchet_gateway) and the control plane (ratchet_assets).

Nothing here imports Dagster, FastAPI or torch at import time: settings, row schemas, the release-manifest
format, keys, the built-in workloads and the chat format the student is trained and served with. A module with
one user lives beside that user instead; tests/layers.py holds the layers (ARCHITECTURE.md, "Layers").
"""
