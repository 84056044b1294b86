"""``ratchet sim --receipts``: each simulated day's receipt, sealed by the night's own receipt code.

The night's ``daily_receipt`` step (``ratchet_assets.night.receipts.build_receipt``) reads the day's consolidated
traffic, commits to every row, prices student-served rows as the teacher would (``ratchet_stats
.teacher_equivalent``: the prompt at the teacher's input price plus the task's mean completion of the teacher's own
answers that day) and signs through the effect ledger. Here it signs with a key derived from the seed (never a key
anyone trusts; its public half is written to ``<home>/sim-receipt-key.pub`` so ``ratchet verify receipt`` can check
the files) into a control DB under the home. Ed25519 signatures are deterministic and the receipt holds no clock,
so the same arguments seal the same bytes.

The simulator knows what the receipt can only estimate: what the teacher would really have billed for every
request, its reasoning tokens included. :meth:`ReceiptSealer.seal` puts the two side by side.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

KEY_FILE = "sim-receipt-key.pub"


class ReceiptSealer:
    """Seals one simulation's receipts, day by day, in order (each chains to the previous one)."""

    def __init__(self, home: Path, seed: int, teacher_model: str) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        from ratchet_assets.effects import EffectLedger
        from ratchet_core.control_db import make_engine
        from ratchet_stats.keys import public_key_pem

        seed_bytes = hashlib.sha256(f"ratchet-sim-receipt-key:{seed}".encode()).digest()
        self.key = Ed25519PrivateKey.from_private_bytes(seed_bytes)
        home.mkdir(parents=True, exist_ok=True)
        (home / KEY_FILE).write_text(public_key_pem(self.key))
        self.engine = make_engine(f"sqlite:///{(home / 'control.db').as_posix()}")
        self.ledger = EffectLedger(self.engine)
        self.teacher_model = teacher_model

    def seal(self, artifacts: Path, day: str, true_all_teacher_usd: float) -> dict[str, Any]:
        """Build and sign `day`'s receipt from its consolidated traffic; its totals beside the true cost."""
        from ratchet_assets.night.receipts import build_receipt

        r = build_receipt(artifacts, day, self.key, self.ledger, teacher_model=self.teacher_model)
        t = r.totals
        te = t["teacher_cost_micro_usd"] / 1e6
        return {
            "envelope_digest": r.envelope_digest,
            "root": r.root,
            "requests": r.size,
            "teacher_equivalent_usd": round(te, 6),
            "measured_usd": round(t["teacher_cost_measured_micro_usd"] / 1e6, 6),
            "estimated_usd": round(t["teacher_cost_estimated_micro_usd"] / 1e6, 6),
            "paid_usd": round(t["actual_cost_micro_usd"] / 1e6, 6),
            "saved_usd": round(t["saved_micro_usd"] / 1e6, 6),
            "true_all_teacher_usd": round(true_all_teacher_usd, 6),
            "estimate_error": round(te / true_all_teacher_usd - 1.0, 6) if true_all_teacher_usd else None,
        }

    def close(self) -> None:
        self.engine.dispose()
