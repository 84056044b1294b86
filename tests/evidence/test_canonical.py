"""Canonical JSON: RFC 8785 ordering and escaping, rejection of what cannot be signed, digests."""

from __future__ import annotations

import hashlib
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_stats.canonical import canonical_json, digest, sha256_hex

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def test_rfc8785_key_order_is_utf16_code_units():
    # RFC 8785 §3.2.3's own example: the emoji (a surrogate pair in UTF-16) sorts BEFORE U+FB33, although its
    # code point is larger.
    obj = {
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\U0001f600": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis",
    }
    expected = (
        '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",'
        '"\u20ac":"Euro Sign","\U0001f600":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}'
    )
    assert canonical_json(obj) == expected.encode("utf-8")


def test_structure_whitespace_and_escapes():
    assert canonical_json({"b": 1, "a": [True, None, "x"], "c": {}}) == b'{"a":[true,null,"x"],"b":1,"c":{}}'
    # Only the escapes JSON requires, control characters as lower-case \u00xx, non-ASCII as raw UTF-8.
    assert (
        canonical_json('\x0f\x1f\n\t"\\/\u00e9\u2028')
        == '"\\u000f\\u001f\\n\\t\\"\\\\/\u00e9\u2028"'.encode()
    )
    assert canonical_json([1, 2.5, -0.0, 10**25]) == b"[1,2.5,-0.0,10000000000000000000000000]"
    assert canonical_json((1, "a")) == canonical_json([1, "a"])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, {"x": [1, math.nan]}])
def test_non_finite_numbers_are_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        canonical_json(bad)


@pytest.mark.parametrize("bad", [{1: "a"}, {"ok": {None: 1}}, {("t",): 1}])
def test_non_string_keys_are_refused(bad):
    with pytest.raises(ValueError, match="keys must be strings"):
        canonical_json(bad)


def test_unrepresentable_values_say_what_to_do():
    with pytest.raises(TypeError, match=r"\$\.when is a bytes.*convert"):
        canonical_json({"when": b"\x00"})
    with pytest.raises(ValueError, match="surrogate"):
        canonical_json({"s": "\ud800"})


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_round_trip_and_order_independence(value):
    encoded = canonical_json(value)
    decoded = json.loads(encoded.decode("utf-8"))
    assert canonical_json(decoded) == encoded  # a fixed point: parse + canonicalise reproduces the bytes
    if isinstance(value, dict):
        reversed_order = dict(reversed(list(value.items())))
        assert canonical_json(reversed_order) == encoded


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_are_shortest_round_trip(x):
    text = canonical_json(x).decode()
    assert float(text) == x
    assert text == repr(x)


def test_digests():
    assert (
        sha256_hex(b"abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )  # FIPS 180-2
    assert digest({"b": 2, "a": 1}) == hashlib.sha256(b'{"a":1,"b":2}').hexdigest()
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1})
    assert digest({"a": 1}) != digest({"a": 1.0})
