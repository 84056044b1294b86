"""Ed25519 keys and DSSE envelopes: round trips, the RFC 8032 / DSSE vectors, and fail-closed verification."""

from __future__ import annotations

import base64
import hashlib
import json
import stat

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ratchet_stats import dsse, keys
from ratchet_stats.canonical import canonical_json

PRED = "https://example.test/predicate/v1"
SUBJECT = [{"name": "adapter", "digest": {"sha256": "ab" * 32}}]

# RFC 8032 §7.1, TEST 1.
RFC8032_SECRET = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")


def _raw_public(k) -> bytes:
    return k.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def test_rfc8032_vector_and_key_id():
    k = keys.load_private_key(base64.b64encode(RFC8032_SECRET))
    assert base64.b64decode(keys.public_key_b64(k.public_key())) == RFC8032_PUBLIC
    assert keys.key_id(k.public_key()) == hashlib.sha256(RFC8032_PUBLIC).hexdigest()
    assert keys.key_id(k) == keys.key_id(k.public_key())


def test_keys_round_trip_pem_and_base64(signing_key, tmp_path):
    raw_pub = _raw_public(signing_key.public_key())
    for text in (keys.private_key_pem(signing_key), keys.private_key_b64(signing_key)):
        for form in (text, text.encode()):
            assert _raw_public(keys.load_private_key(form).public_key()) == raw_pub
    for text in (
        keys.public_key_pem(signing_key.public_key()),
        keys.public_key_b64(signing_key.public_key()),
    ):
        assert _raw_public(keys.load_public_key(text)) == raw_pub
    for fmt in ("pem", "base64"):
        path = keys.save_private_key(signing_key, tmp_path / f"k-{fmt}", fmt)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert _raw_public(keys.load_private_key_file(path).public_key()) == raw_pub


def test_key_errors_name_the_problem_without_key_material(signing_key, tmp_path):
    secret = keys.private_key_b64(signing_key)
    with pytest.raises(ValueError, match="PRIVATE key") as exc:
        keys.load_public_key(keys.private_key_pem(signing_key))
    assert secret not in str(exc.value)
    with pytest.raises(ValueError, match="PUBLIC key"):
        keys.load_private_key(keys.public_key_pem(signing_key.public_key()))
    with pytest.raises(ValueError, match="48 bytes.*ratchet keygen") as exc:
        keys.load_private_key(base64.b64encode(base64.b64decode(secret) + b"x" * 16))
    assert secret not in str(exc.value)
    with pytest.raises(ValueError, match="does not exist.*ratchet keygen"):
        keys.load_private_key_file(tmp_path / "missing.key")


def test_pae_matches_the_dsse_spec_example():
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def _signed(key, predicate=None):
    statement = dsse.make_statement(PRED, predicate or {"precision": 0.97, "tasks": ["a", "b"]}, SUBJECT)
    return statement, dsse.sign_statement(statement, key)


def test_sign_verify_round_trip_checked_independently(signing_key):
    statement, envelope = _signed(signing_key)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(envelope["payload"])
    assert json.loads(payload) == statement
    sig = envelope["signatures"][0]
    assert sig["keyid"] == hashlib.sha256(_raw_public(signing_key.public_key())).hexdigest()
    # Independent check with cryptography over a PAE built by hand.
    message = b"DSSEv1 %d application/vnd.in-toto+json %d " % (
        len("application/vnd.in-toto+json"),
        len(payload),
    )
    signing_key.public_key().verify(base64.b64decode(sig["sig"]), message + payload)
    for form in (envelope, json.dumps(envelope), json.dumps(envelope).encode()):
        assert dsse.verify_statement(form, signing_key.public_key(), PRED) == statement
    assert dsse.verify_envelope(
        envelope, [Ed25519PrivateKey.generate().public_key(), signing_key.public_key()]
    )


def test_every_changed_byte_of_the_envelope_fails_naming_its_check(signing_key):
    _, envelope = _signed(signing_key)
    text = canonical_json(envelope)
    regions = {}
    for field in ("payloadType", "payload", "keyid", "sig"):
        value = envelope[field] if field in envelope else envelope["signatures"][0][field]
        start = text.index(b'"%s":"%s"' % (field.encode(), value.encode())) + len(field) + 4
        regions[field] = range(start, start + len(value))
    allowed = {"payloadType": {"payload-type"}, "payload": {"envelope", "signature"}, "keyid": {"keyid"}}
    allowed["sig"] = {"signature"}
    pub = signing_key.public_key()
    seen = set()
    for i in range(len(text)):
        field = next((f for f, r in regions.items() if i in r), None)
        for mask in (0x01, 0x20, 0x80):
            changed = text[:i] + bytes([text[i] ^ mask]) + text[i + 1 :]
            with pytest.raises(dsse.VerificationError) as exc:
                dsse.verify_statement(changed, pub, PRED)
            ok = allowed.get(field, {"envelope", "keyid"})
            if mask == 0x20:  # may turn a character into a control character: no longer JSON
                ok = ok | {"envelope"}
            if mask == 0x80:  # not UTF-8 any more
                ok = {"envelope"}
            assert exc.value.check in ok, (i, field, mask, exc.value)
            seen.add(exc.value.check)
    assert {"envelope", "payload-type", "keyid", "signature"} <= seen


def test_non_canonical_base64_is_refused(signing_key):
    _, envelope = dsse.make_statement(PRED, {}, SUBJECT), dsse.sign_envelope(b"hi", signing_key)
    assert envelope["payload"] == "aGk="
    changed = {**envelope, "payload": "aGl="}  # same bytes under a lenient decoder
    assert base64.b64decode("aGl=") == b"hi"
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_envelope(changed, signing_key.public_key())
    assert exc.value.check == "envelope"


def test_another_key_fails_on_keyid_or_signature(signing_key, other_key):
    _, envelope = _signed(other_key)
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(envelope, signing_key.public_key())
    assert exc.value.check == "keyid"
    # A forger who copies the trusted key id onto their own signature.
    forged = {
        **envelope,
        "signatures": [{"keyid": keys.key_id(signing_key), "sig": envelope["signatures"][0]["sig"]}],
    }
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(forged, signing_key.public_key())
    assert exc.value.check == "signature"
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(envelope, [])
    assert exc.value.check == "keyid"


def test_signature_is_checked_before_the_payload_is_parsed(signing_key, other_key):
    garbage = dsse.sign_envelope(b"{not json", other_key)
    with pytest.raises(dsse.VerificationError) as exc:  # unparsable AND untrusted: the signature check wins
        dsse.verify_statement(garbage, signing_key.public_key())
    assert exc.value.check == "keyid"
    trusted_garbage = dsse.sign_envelope(b"{not json", signing_key)
    assert dsse.verify_envelope(trusted_garbage, signing_key.public_key()) == b"{not json"
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(trusted_garbage, signing_key.public_key())
    assert exc.value.check == "payload"


@pytest.mark.parametrize(
    ("statement", "check"),
    [
        (
            {
                "_type": "https://in-toto.io/Statement/v0.1",
                "subject": SUBJECT,
                "predicateType": PRED,
                "predicate": {},
            },
            "statement-type",
        ),
        ({"_type": dsse.STATEMENT_TYPE, "subject": [], "predicateType": PRED, "predicate": {}}, "subject"),
        (
            {
                "_type": dsse.STATEMENT_TYPE,
                "subject": SUBJECT,
                "predicateType": "https://other/v1",
                "predicate": {},
            },
            "predicate-type",
        ),
        (
            {"_type": dsse.STATEMENT_TYPE, "subject": SUBJECT, "predicateType": PRED, "predicate": [1]},
            "predicate",
        ),
    ],
)
def test_statement_checks(signing_key, statement, check):
    envelope = dsse.sign_envelope(canonical_json(statement), signing_key)
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(envelope, signing_key.public_key(), PRED)
    assert exc.value.check == check


def test_wrong_payload_type_and_duplicate_keys(signing_key):
    statement, _ = _signed(signing_key)
    other_type = dsse.sign_envelope(canonical_json(statement), signing_key, payload_type="application/json")
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(other_type, signing_key.public_key())
    assert exc.value.check == "payload-type"
    dup = b'{"_type":"x","_type":"' + dsse.STATEMENT_TYPE.encode() + b'"}'
    with pytest.raises(dsse.VerificationError) as exc:
        dsse.verify_statement(dsse.sign_envelope(dup, signing_key), signing_key.public_key())
    assert exc.value.check == "payload"


def test_make_statement_refuses_bad_subjects():
    with pytest.raises(ValueError, match="sha256"):
        dsse.make_statement(PRED, {}, [{"name": "x", "digest": {"sha256": "XYZ"}}])
    with pytest.raises(ValueError, match="non-empty"):
        dsse.make_statement(PRED, {}, [])
