"""Shared fixtures. Every test writes under its own tmp_path; nothing touches the network."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# With RATCHET_HOME unset, Ratchet's home is ./.ratchet, i.e. the checkout's own after `make demo`: a test that
# does not set its home would read the demo's control DB, keys and certificates. The session gets a home of its
# own that does not exist yet (as on a fresh clone); tests that need one still set theirs.
os.environ.setdefault("RATCHET_HOME", str(Path(tempfile.mkdtemp(prefix="ratchet-test-session-")) / "home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
