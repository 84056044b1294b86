"""JSON Schema regular expressions with a time limit, for schemas a client wrote.

A request's ``json_schema`` or tool parameters may carry any ``pattern``/``patternProperties``; jsonschema matches
them with :mod:`re`, which holds the GIL for as long as a catastrophic pattern backtracks (``^(a|aa)+$`` on
forty characters takes minutes), so one request could stall the whole gateway. :func:`bounded` returns a
validator class whose ``pattern``, ``patternProperties`` and ``additionalProperties`` keywords match with the
``regex`` package instead, each search limited to :data:`SEARCH_TIMEOUT_S` and releasing the GIL; a search that
runs out raises :class:`PatternTimeout` (the answer-contract guard then reports ``schema_unusable``: it cannot
vouch for the answer, so the teacher answers). Other keywords are jsonschema's own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError

SEARCH_TIMEOUT_S = 0.05


class PatternTimeout(Exception):
    """A schema's regular expression took longer than SEARCH_TIMEOUT_S on one string."""


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (ECMA-262 semantics as far as Python's syntax goes)."""
    try:
        return _compiled(pattern).search(text, timeout=SEARCH_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError:
        raise PatternTimeout(f"a schema pattern ran longer than {SEARCH_TIMEOUT_S:g} s") from None


def _pattern(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not search(patrn, instance):
        yield ValidationError(f"does not match {patrn!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        for k, v in instance.items():
            if search(patrn, k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional_properties(validator, ap, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(search(p, k) for p in patterns)]
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        # jsonschema's message quotes the extra keys; this one names how many (the keys are the answer's text)
        yield ValidationError(f"{len(extras)} unexpected propert{'y' if len(extras) == 1 else 'ies'}")


_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@lru_cache(maxsize=16)
def bounded(cls: type) -> type:
    """`cls` (a jsonschema validator class) with time-limited regular expressions."""
    return validators.extend(cls, _KEYWORDS)
