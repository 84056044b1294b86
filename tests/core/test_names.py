"""The one name rule (ratchet_core.names): every kind accepts its names and refuses what a path, a header, a log
line or a signed document could misread, a trailing newline included."""

from __future__ import annotations

import pytest

from ratchet_core.names import NameRuleError, check, is_valid


@pytest.mark.parametrize(
    "kind,value",
    [
        ("task", "tickets"),
        ("task", "a"),
        ("task", "9-x.y_z"),
        ("task", "t" * 64),
        ("client", "acme-1"),
        ("version", "v3-1a2b3c4d"),
        ("version", "v" * 128),
        ("request id", "req_0123456789abcdef01234567"),
        ("request id", "-x"),
        ("day", "2026-01-02"),
        ("day", "2024-02-29"),
        ("effect type", "training.launch"),
        ("effect type", "scout/report.file"),
        ("effect key", "http://127.0.0.1:8000/v1|v3-1a2b3c4d"),
        ("effect key", "k" * 512),
    ],
)
def test_valid_names(kind, value):
    assert is_valid(kind, value)
    assert check(kind, value) == value


@pytest.mark.parametrize(
    "kind,value",
    [
        ("task", ""),
        ("task", "tickets\n"),  # a trailing %0a: `$` would have let it pass
        ("task", "tickets\r\nX-Evil: 1"),
        ("task", "../../evil"),
        ("task", ".hidden"),
        ("task", "-option"),
        ("task", "<b>x</b>"),
        ("task", "t" * 65),
        ("task", "tâche"),
        ("task", 7),
        ("task", None),
        ("client", "a b"),
        ("client", "a/b"),
        ("version", "v1..2"),
        ("version", "v" * 129),
        ("version", "v1\n"),
        ("request id", ""),
        ("request id", "req 1"),
        ("request id", "r" * 129),
        ("day", "2026-13-45"),
        ("day", "2026-02-30"),
        ("day", "2026-1-2"),
        ("day", "2026-01-02\n"),
        ("day", "２０２６-01-02"),
        ("effect type", "scout/x/y"),
        ("effect type", "scout/"),
        ("effect type", "t" * 65),
        ("effect type", "report\u202e.file"),
        ("effect key", ""),
        ("effect key", "k" * 513),
        ("effect key", "invoice-\u202egnp.exe"),  # right-to-left override
        ("effect key", "a\u2066b"),  # left-to-right isolate
        ("effect key", "line\nforged"),
        ("effect key", "a b"),
        ("effect key", "clé"),
    ],
)
def test_invalid_names_are_refused_with_the_rule_and_a_short_escaped_value(kind, value):
    assert not is_valid(kind, value)
    with pytest.raises(NameRuleError) as info:
        check(kind, value, "--thing")
    message = info.value.message
    assert message.startswith("--thing ") and f"not a valid {kind}" in message
    assert "\n" not in message and "\r" not in message
    assert info.value.kind == kind


def test_a_long_value_is_not_echoed():
    with pytest.raises(NameRuleError) as info:
        check("task", "x" * 100_000 + "\n")
    assert len(info.value.message) < 300
