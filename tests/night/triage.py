"""A five-label task the project has never seen, with near-duplicate prompts: ``triage``.

Not a built-in workload and not ``moods``: only the tests and ``benchmarks/warm_start.py`` know it. Traffic comes in
*clusters*: one request, sent again a few times with small changes (case, punctuation, spacing, another ticket
number), as people resend a message. Most clusters say what they are about (a keyword phrase of their label, among
other words); the rest are vague notes the teacher labelled by its own lights (the label is a hash of the note),
which a model can only learn by heart. So a model that memorises scores well on a near-duplicate of a row it trained
on and not on a fresh request: the gap the validation split must not hide.
"""

from __future__ import annotations

import hashlib
import random

LABELS = ("billing", "outage", "access", "feedback", "legal")
SYSTEM = "Triage the message as one of: " + ", ".join(LABELS) + ". Answer with the label only."

_KEYWORDS = {
    "billing": ("charged twice", "refund my payment", "the invoice is wrong", "card was declined"),
    "outage": ("the site is down", "error 500 again", "pages are not loading", "server unreachable"),
    "access": ("cannot log in", "reset my password", "locked out of my account", "2fa code never came"),
    "feedback": ("love the new layout", "a small suggestion", "would be nice to have", "great update"),
    "legal": (
        "gdpr data request",
        "delete my personal data",
        "terms of service question",
        "a subpoena arrived",
    ),
}
_OPENERS = ("hi team", "hello", "good morning", "hey there", "dear support", "quick note", "urgent", "fyi")
_CONTEXT = (
    "since yesterday",
    "for the berlin office",
    "on the mobile app",
    "for our team plan",
    "after the upgrade",
    "on my laptop",
    "for client acme",
    "this week",
    "in the eu region",
    "for the annual plan",
)
_VAGUE = (
    "about the thing from {ctx}, can someone look",
    "same issue as before {ctx}, see ticket",
    "following up on my last message {ctx}",
    "not sure who handles this {ctx}",
    "the usual problem {ctx}, please advise",
    "need help with something {ctx}",
)


def _ticket(rng: random.Random) -> str:
    return str(rng.randint(1000, 99999))


def _variant(text: str, rng: random.Random) -> str:
    """A resent copy: another ticket number, other case, punctuation and spacing."""
    out = text.replace("{ticket}", _ticket(rng))
    style = rng.randrange(4)
    if style == 1:
        out = out.upper()
    elif style == 2:
        out = out.capitalize() + "!"
    elif style == 3:
        out = "  " + out.replace(", ", " ,  ") + " ..."
    return out


def clusters(seed: int, n: int, vague_share: float = 0.4) -> list[tuple[str, str]]:
    """``n`` clusters as (note with a ``{ticket}`` slot, label), deterministic in ``seed``."""
    rng = random.Random(f"triage:{seed}")
    out = []
    for _ in range(n):
        ctx = rng.choice(_CONTEXT)
        if rng.random() < vague_share:
            note = f"{rng.choice(_OPENERS)}, {rng.choice(_VAGUE).format(ctx=ctx)} #{{ticket}} {rng.choice(_CONTEXT)}"
            label = LABELS[int(hashlib.sha256(note.encode()).hexdigest(), 16) % len(LABELS)]
        else:
            label = rng.choice(LABELS)
            note = f"{rng.choice(_OPENERS)}, {rng.choice(_KEYWORDS[label])} {ctx} (ticket {{ticket}})"
        out.append((note, label))
    return out


def rows(
    seed: int, n_clusters: int, copies: tuple[int, int] = (2, 4), vague_share: float = 0.4
) -> list[dict]:
    """Chat fine-tuning rows (system, user, assistant label): each cluster sent ``copies`` times (inclusive range),
    each copy a near-duplicate (``_variant``)."""
    rng = random.Random(f"triage-copies:{seed}")
    out = []
    for note, label in clusters(seed, n_clusters, vague_share):
        for _ in range(rng.randint(*copies)):
            out.append(
                {
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": _variant(note, rng)},
                        {"role": "assistant", "content": label},
                    ]
                }
            )
    return out


def fresh(seed: int, n: int, vague_share: float = 0.4) -> list[dict]:
    """``n`` fresh requests: one copy each of new clusters (another seed than the training rows')."""
    return rows(seed, n, copies=(1, 1), vague_share=vague_share)


def label_of(row: dict) -> str:
    return row["messages"][-1]["content"]


def user_text(row: dict) -> str:
    return row["messages"][1]["content"]
