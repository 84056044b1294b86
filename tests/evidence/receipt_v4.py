"""A made-up receipt v4, written as a real version would be: one module exporting one ``FORMAT``.

v4 is v3 plus a signed ``note`` (text). Registering it is the one line a real v4 adds to
``ratchet_stats.receipt.FORMATS``; the tests do it with ``monkeypatch.setitem`` and see every dispatch point
(auditor verification, chaining, client views, the night's carried estimates) pick it up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratchet_stats.receipt import v3
from ratchet_stats.receipt.common import (
    AuditorFiles,
    FilesReport,
    Previous,
    ReceiptFormat,
    check_estimates,
    need,
)

PREDICATE_TYPE = "https://ratchet.dev/receipt/v4-example"


def make_predicate(v3_predicate: Mapping[str, Any], note: str) -> dict[str, Any]:
    return {**v3_predicate, "note": note}


def check_shape(p: Any, what: str) -> None:
    v3.check_shape(p, what)
    need(isinstance(p.get("note"), str), "predicate", f"{what}: note must be text")


def check_predicate(predicate: Mapping[str, Any]) -> list[str]:
    need(predicate["note"].strip() != "", "note", "the note is empty")
    return ["note"]


def check_files(predicate: Mapping[str, Any], files: AuditorFiles, previous: Previous | None) -> FilesReport:
    return v3.check_files(predicate, files, previous)


FORMAT = ReceiptFormat(
    version=4,
    predicate_type=PREDICATE_TYPE,
    check_shape=check_shape,
    check_predicate=check_predicate,
    check_files=check_files,
    check_estimates=check_estimates,
    check_client_view=v3.check_client_view,
)
