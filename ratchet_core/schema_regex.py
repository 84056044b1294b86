"""JSON Schema regular expressions with a time limit, for schemas a client wrote.

A request's ``json_schema`` or tool parameters may carry any ``pattern``/``patternProperties``; jsonschema matches
them with :mod:`re`, which holds the GIL for as long as a catastrophic pattern backtracks (``^(a|aa)+$`` on
forty characters takes minutes), so one request could stall the whole gateway. :func:`bounded` returns a
validator class whose ``pattern``, ``patternProperties`` and ``additionalProperties`` keywords match with the
``regex`` package instead, each search limited to :data:`SEARCH_TIMEOUT_S` and releasing the GIL; a search that
runs out raises :class:`PatternTimeout` (the answer-contract guard then reports ``schema_unusable``: it cannot
vouch for the answer, so the teacher answers). Other keywords are jsonschema's own.

Compiling is bounded too: ``regex`` expands counted repeats while it compiles, holding the GIL (measured:
``(a{1000}){1000}`` took a second), so a pattern longer than :data:`MAX_PATTERN_CHARS` or whose counted repeats
multiply past :data:`MAX_EXPANSION` is never compiled (:class:`PatternTooCostly`, a ``PatternTimeout``). And a
whole check has a deadline (:func:`deadline`): once it passes, every further search raises, so a schema with
thousands of patterns stops soon after its time, even in a worker thread nobody waits for any more.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

import regex
from jsonschema import validators
from jsonschema.exceptions import ValidationError

SEARCH_TIMEOUT_S = 0.05
MAX_PATTERN_CHARS = 1000
MAX_EXPANSION = 10_000  # characters a compiled pattern may spell out once its counted repeats are expanded


class PatternTimeout(Exception):
    """A schema's regular expression took longer than SEARCH_TIMEOUT_S on one string, or its check's deadline
    passed."""


class PatternTooCostly(PatternTimeout):
    """A schema's regular expression would take too long to compile (length, or counted repeats)."""


_local = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Searches in this thread raise PatternTimeout once `seconds` have passed (one answer's whole check)."""
    _local.until = time.monotonic() + seconds
    try:
        yield
    finally:
        _local.until = None


def _expansion(items: Any) -> int:
    """How many characters the pattern's parse tree spells out with its counted repeats expanded."""
    total = 0
    for op, av in items:
        if op in (re._constants.MAX_REPEAT, re._constants.MIN_REPEAT, re._constants.POSSESSIVE_REPEAT):  # type: ignore[attr-defined]
            lo, hi, body = av
            count = hi if hi != re._constants.MAXREPEAT else max(lo, 1)  # type: ignore[attr-defined]
            total += count * max(_expansion(body), 1)
        elif op is re._constants.SUBPATTERN:  # type: ignore[attr-defined]
            total += _expansion(av[3])
        elif op is re._constants.BRANCH:  # type: ignore[attr-defined]
            total += sum(_expansion(alt) for alt in av[1])
        elif op in (re._constants.ASSERT, re._constants.ASSERT_NOT):  # type: ignore[attr-defined]
            total += _expansion(av[1])
        elif op is re._constants.ATOMIC_GROUP:  # type: ignore[attr-defined]
            total += _expansion(av)
        else:
            total += 1
        if total > MAX_EXPANSION:
            break
    return total


def too_costly(pattern: str) -> bool:
    """Whether compiling `pattern` could take long (module docstring). A pattern Python's parser cannot read
    (ECMA-only syntax such as ``\\p{L}``) is judged by its counted repeats alone, all multiplied."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return True
    try:
        tree = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, OverflowError):
        product = 1
        for count in re.findall(r"\{(\d{1,9})", pattern):
            product *= max(int(count), 1)
            if product > MAX_EXPANSION:
                return True
        return False
    return _expansion(tree.data) > MAX_EXPANSION


@lru_cache(maxsize=1024)
def _compiled(pattern: str) -> Any:
    if too_costly(pattern):
        raise PatternTooCostly(
            f"a schema pattern is too costly to compile (over {MAX_PATTERN_CHARS} characters, or counted "
            f"repeats spelling out over {MAX_EXPANSION})"
        )
    return regex.compile(pattern)


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (ECMA-262 semantics as far as Python's syntax goes)."""
    until = getattr(_local, "until", None)
    timeout = SEARCH_TIMEOUT_S
    if until is not None:
        timeout = min(timeout, until - time.monotonic())
        if timeout <= 0:
            raise PatternTimeout("the answer's check ran out of time")
    try:
        return _compiled(pattern).search(text, timeout=timeout, concurrent=True) is not None
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
