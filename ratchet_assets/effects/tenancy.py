"""Tenancy: a client of the HTTP gate owns the namespace ``<client>/`` (ARCHITECTURE.md, "Effects").

The control plane's own types (``training.launch``, ``release.live``, ``liverun.<run>``...) have no ``/``. Every
type a client names is ``<client>/<name>`` (:func:`client_effect_type`), so no client can begin, report, read or
exhaust the cap of the control plane's types or another client's. Rules on ``<client>/*`` (:func:`client_cap_type`)
hold the client's own cap over all its types.
"""

from __future__ import annotations

import re

from ratchet_assets.effects.records import EffectError, ForeignType
from ratchet_core import names

NAMESPACE_SEP = "/"
ALL_TYPES = "*"  # rules on "<client>/*" cap the client's spend over all its types
EFFECT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_TYPE_LENGTH = 64  # the control DB's effect_type column
MAX_FINGERPRINT_LENGTH = 128  # the control DB's fingerprint column


def namespace_of(effect_type: str) -> str | None:
    """The client whose namespace holds `effect_type`; None for the control plane's own types."""
    client, sep, _ = effect_type.partition(NAMESPACE_SEP)
    return client if sep else None


def client_cap_type(client: str) -> str:
    """The rules target of `client`'s whole namespace (its own spend cap): ``<client>/*``."""
    return f"{client}{NAMESPACE_SEP}{ALL_TYPES}"


def is_namespace_rule(effect_type: str) -> bool:
    return effect_type.endswith(NAMESPACE_SEP + ALL_TYPES)


def client_effect_type(client: str, name: str) -> str:
    """The type `client` means by `name`: ``<client>/<name>`` (``<client>/<name>`` itself is accepted too).

    :class:`ForeignType` for a name in another namespace, :class:`EffectError` for a name that is not
    1 or more of ``A-Z a-z 0-9 . _ -`` starting with a letter or digit, or too long for the control DB."""
    own = client + NAMESPACE_SEP
    bare = name.removeprefix(own)
    if NAMESPACE_SEP in bare:
        raise ForeignType(
            f"effect type {name[:80]!r} is outside your namespace: a client's effect types are {own}<name> "
            f"(name them with or without the {own!r} prefix); the control plane's and other clients' types "
            "cannot be used with a client key"
        )
    full = own + bare
    if EFFECT_NAME.fullmatch(bare) is None or len(full) > MAX_TYPE_LENGTH:
        raise EffectError(
            f"effect type {name[:80]!r}: a name is 1-{MAX_TYPE_LENGTH - len(own)} characters of A-Z, a-z, 0-9, "
            "'.', '_' and '-', starting with a letter or digit"
        )
    return full


def check_effect_type(effect_type: str, *, rules_target: bool = False) -> str:
    """`effect_type` when it follows the one name rule (``ratchet_core.names``, "effect type"), else
    :class:`EffectError` naming ``effect_type``; a ``rules_target`` may also be a client's ``<client>/*``."""
    name = effect_type
    if rules_target and isinstance(name, str) and is_namespace_rule(name):
        name = name.removesuffix(NAMESPACE_SEP + ALL_TYPES)
    try:
        names.check("effect type", name, "effect_type")
    except names.NameRuleError as exc:
        raise EffectError(exc.message, "effect_type", "invalid_effect_type") from None
    return effect_type


def check_key(key: str) -> str:
    """`key` when it follows the one name rule ("effect key": printable ASCII, no control or bidi character)."""
    try:
        return names.check("effect key", key, "key")
    except names.NameRuleError as exc:
        raise EffectError(exc.message, "key", "invalid_effect_key") from None


def check_fingerprint(fingerprint: str) -> str:
    """`fingerprint` (a digest of the payload, echoed when another payload is refused) by the key's rule."""
    if not names.is_valid("effect key", fingerprint) or len(fingerprint) > MAX_FINGERPRINT_LENGTH:
        raise EffectError(
            f"fingerprint {names.shown(fingerprint)} is not valid: a fingerprint is 1-128 printable ASCII "
            "characters ('!' to '~': no space, control or bidi character), e.g. sha256:<hex of the payload>",
            "fingerprint",
            "invalid_fingerprint",
        )
    return fingerprint
