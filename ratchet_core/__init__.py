"""Small modules shared by the data plane (ratchet_gateway) and the control plane (ratchet_assets).

Nothing here imports Dagster, FastAPI or torch at import time: settings, row schemas, the release-manifest
format, keys, the built-in workloads and the chat format the student is trained and served with. A module with
one user lives beside that user instead; tests/layers.py holds the layers (ARCHITECTURE.md, "Layers").
"""

import os

# Ratchet never reaches for the network unless configured to: litellm fetches its price map from the internet when
# it is imported, unless LITELLM_LOCAL_MODEL_COST_MAP is set. Every Ratchet process imports this package before
# litellm (``ratchet_core.pricing`` is the one reader of prices; ``ratchet_cli.main`` imports this package first),
# so the bundled map is used; a user who wants the remote map sets the variable to False.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Nor do the Hugging Face libraries: a base is a local folder, yet peft looks a base's config up on the Hub by the
# base's name when it saves an adapter trained from a parent (a warm night). Unless HF_HUB_OFFLINE is set, they run
# offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
