"""Every redaction pattern does work linear in its text, with a small constant, on any text a client can send.

Work is counted, not timed (``tests/regex_work.py``: the steps a backtracking engine takes to find every match):
on a text four times as long a linear pattern does about four times the work, a quadratic one sixteen. Texts are
adversarial motifs repeated (the ones that broke earlier patterns, and hypothesis's), and the counting matcher is
checked against the real engine on the same texts (same matches), so what it counts is what the engine searches.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ratchet_core import redact
from tests.regex_work import TooMuchWork, scan_spans, scan_work

# Every pattern redaction runs over client text: the rules and the gates' searches.
PATTERNS = {
    name: getattr(redact, name)
    for name in dir(redact)
    if name.startswith("_") and hasattr(getattr(redact, name), "finditer")
}
RULES = [pattern for pattern, _ in redact._DEFAULT_RULES]

GROWTH = 6.0  # work on a 4x longer text; linear is ~4, quadratic ~16
PER_CHAR = 200  # the most steps per character a pattern may take (the email rules' bounded windows: ~100)

# Motifs that made a pattern superlinear or costly at some point (the email rules from every '%', JWTs from
# every "-eyJ", international phone numbers split in every way), and their neighbours.
WORST = [
    ("a%", "@"),
    ("a%", ""),
    ("\u00e9%", "@"),
    ("-eyJ", ""),
    ("eyJaaaaaaaa.", ""),
    ("+1" + "1" * 40 + " ", "@"),
    ("+1 (1) ", ""),
    ("a@" + "a-" * 40, "!"),
    ("a@a.", "1"),
    ("a" * 40 + "=== ", ""),
    ("bearer ", ""),
    ("1 ", ""),
    ("1234 \u2013 56 ", ""),
    ("1.2.3.4.", ""),
    ("1:1:1:1:1:1:1:1:", ""),
    ("DE00" + "1" * 40 + " ", "@"),
    ('\\"', ""),
    ("[", ""),
    ("sk-", "!"),
    ("xoxb-", ""),
    ("\uff20a\uff0e", ""),
]


def _cost(pattern, motif: str, suffix: str, length: int) -> tuple[int, int]:
    """(work on ~`length` characters of the motif, work on 4x that)."""
    n = max(1, length // len(motif))
    small = scan_work(
        pattern, motif * n + suffix, budget=PER_CHAR * 2 * (len(motif) * n + len(suffix)) + 10_000
    )
    large = scan_work(pattern, motif * 4 * n + suffix, budget=PER_CHAR * 8 * (len(motif) * n + len(suffix)))
    return small, large


def _check_linear(name: str, pattern, motif: str, suffix: str, length: int) -> None:
    try:
        small, large = _cost(pattern, motif, suffix, length)
    except TooMuchWork:
        pytest.fail(f"{name} takes more than {PER_CHAR} steps per character on {motif!r} * n + {suffix!r}")
    text = len(motif) * 4 * max(1, length // len(motif)) + len(suffix)
    assert large <= GROWTH * small, (
        f"{name} grows {large / small:.1f}x on a 4x longer {motif!r} * n + {suffix!r}"
    )
    assert large <= PER_CHAR * text, f"{name} takes {large / text:.0f} steps per character on {motif!r}"


@pytest.mark.parametrize(("motif", "suffix"), WORST)
def test_every_pattern_is_linear_on_the_worst_motifs(motif: str, suffix: str) -> None:
    for name, pattern in PATTERNS.items():
        _check_linear(name, pattern, motif, suffix, 600)


_ALPHABET = 'a%@.-+1 :eyJ_=(/)\u00e9\uff20\uff0eAZ0x9\u00a0\u2013\t\\"'


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    motif=st.text(alphabet=_ALPHABET, min_size=1, max_size=6),
    suffix=st.sampled_from(["", "@", "!", "1", "a.b"]),
)
def test_every_rule_is_linear_on_generated_motifs(motif: str, suffix: str) -> None:
    for pattern in RULES:
        _check_linear(pattern.pattern[:40], pattern, motif, suffix, 200)


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=_ALPHABET + "bcdk0123456789", max_size=80))
def test_the_counting_matcher_finds_what_the_engines_find(text: str) -> None:
    """The oracle: the counting matcher, ``regex`` (what redaction runs) and ``re`` on the same source all find
    the same matches, so the work counted is the engines' search and the engine switch changed no match."""
    for pattern in PATTERNS.values():
        found = [m.span() for m in pattern.finditer(text)]
        assert scan_spans(pattern, text) == found
        assert [m.span() for m in re.finditer(pattern.pattern, text, pattern.flags & re.IGNORECASE)] == found


def test_the_issue_motif_is_redacted_in_linear_work() -> None:
    """'a%' * n + '@' (every '%' started an email scan to the '@'): the email rules now stop after 64 octets."""
    for name in ("_EMAIL", "_EMAIL_UNICODE"):
        small, large = _cost(PATTERNS[name], "a%", "@x.com", 2000)
        assert large <= 4.5 * small, name
    # from the first start at most 64 octets before the '@'
    text = "a%" * 40 + "@example.com"
    assert redact.redact_text(text) == "a%" * 8 + redact.placeholder("EMAIL", "a%" * 32 + "@example.com")


def test_long_email_local_parts_are_bounded_at_the_rfc_limit() -> None:
    local = "b" * 64
    assert "@" not in redact.redact_text(f"write to {local}@example.com")
    assert redact.redact_text(f"write to {'b' * 65}@example.com").endswith("@example.com")
