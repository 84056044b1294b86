"""The in-toto predicate type of each document Ratchet signs: signers and verifiers name it from here.

A verifier checks the signature first and then that the Statement's ``predicateType`` is the one it expects
(``ratchet_stats.dsse.verify_statement``), so both sides must spell it the same; one constant each keeps them so.
The receipt's types and versions are ``ratchet_stats.receipt``'s.
"""

from __future__ import annotations

RELEASE_MANIFEST = "https://ratchet.dev/release-manifest/v1"  # ratchet_core.manifest
EVALUATION_CERTIFICATE = "https://ratchet.dev/evaluation-certificate/v1"  # ratchet_stats.certificate
KEY_CHANGE = "https://ratchet.dev/key-change/v1"  # ratchet_core.key_history
ERASURE = "https://ratchet.dev/erasure/v1"  # ratchet_assets.governance.erase
EXPORT = "https://ratchet.dev/export/v1"  # ratchet_assets.governance.export
LIVERUN = "https://ratchet.dev/liverun/v1"  # ratchet_cli.liverun
