"""JSON in pieces (``ratchet_core.json_pieces``) is exactly orjson, only cut into short calls: the same values
parsed, the same bytes written, the same documents refused; pieces of a few bytes exercise every split."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_core import json_pieces
from ratchet_gateway.input_rules import json_too_deep

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=6),
    max_leaves=60,
)


def _text(value, indent: bool) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent else 0)


@settings(max_examples=300, deadline=None)
@given(value=values, piece=st.integers(1, 64), indent=st.booleans())
def test_loads_in_pieces_is_orjson(value, piece: int, indent: bool) -> None:
    raw = _text(value, indent)
    assert json_pieces.loads(raw, piece=piece) == orjson.loads(raw)


@settings(max_examples=300, deadline=None)
@given(value=values, piece=st.integers(1, 64), sort=st.booleans())
def test_dumps_in_pieces_is_orjson(value, piece: int, sort: bool) -> None:
    option = orjson.OPT_SORT_KEYS if sort else 0
    assert json_pieces.dumps(value, option=option, piece=piece) == orjson.dumps(value, option=option)


def _outcome(fn):
    try:
        return ("ok", fn())
    except orjson.JSONDecodeError:
        return ("error", None)


@settings(max_examples=400, deadline=None)
@given(
    value=st.lists(values, min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
    junk=st.sampled_from(
        [b",", b"]", b"}", b"[", b"{", b'"', b"\\", b":", b" ", b"x", b"\xff", b",]", b"[,", b'"a"']
    ),
    piece=st.integers(1, 32),
)
def test_broken_documents_are_refused_as_orjson_refuses_them(
    value, cut: int, junk: bytes, piece: int
) -> None:
    raw = orjson.dumps(value)
    at = cut % (len(raw) + 1)
    broken = raw[:at] + junk + raw[at:]
    assert _outcome(lambda: json_pieces.loads(broken, piece=piece)) == _outcome(lambda: orjson.loads(broken))


@pytest.mark.parametrize(
    "raw",
    [b"[1,2,]", b"[,1]", b'{"a":1,}', b'{"a":1 "b":2}', b"[1]]", b"[[1]", b'["\\"]', b"{1:2}", b"[1}"],
)
def test_malformed_edges_are_refused(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    with pytest.raises(orjson.JSONDecodeError):
        json_pieces.loads(raw, piece=1)


@settings(max_examples=200, deadline=None)
@given(value=values, block=st.integers(1, 16))
def test_depth_in_blocks_is_the_same_depth(value, block: int) -> None:
    raw = orjson.dumps(value)
    old = json_pieces.BLOCK
    json_pieces.BLOCK = block
    try:
        depth = json_pieces.max_depth(raw)
    finally:
        json_pieces.BLOCK = old
    assert depth == _depth(value)
    assert json_too_deep(raw, depth) is False
    assert depth == 0 or json_too_deep(raw, depth - 1) is True


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    return 0


def test_escaped_quotes_across_blocks() -> None:
    """A backslash run that ends one block escapes the quote that starts the next."""
    raw = b'["' + b"\\\\" * 5 + b'\\"' + b"[" * 10 + b'"]'
    assert orjson.loads(raw)
    for block in range(1, len(raw) + 1):
        json_pieces.BLOCK, old = block, json_pieces.BLOCK
        try:
            assert json_pieces.max_depth(raw) == 1, block
        finally:
            json_pieces.BLOCK = old
