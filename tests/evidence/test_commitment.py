"""Committed training sets: membership / non-membership / disjointness proofs verify, forged ones fail."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratchet_stats import commitment as C
from ratchet_stats import merkle
from tests.evidence.auditor import key_of


@pytest.fixture(scope="module")
def tree() -> C.KeyTree:
    return C.KeyTree(key_of(i) for i in range(0, 200, 2))  # even examples trained on


def _absent_keys(tree: C.KeyTree) -> list[str]:
    keys = [key_of(i) for i in range(1, 200, 2)]
    # the edges: below every key and above every key
    return keys + ["0" * 64, "f" * 64]


def test_root_is_rfc6962_root_of_sorted_ascii_keys(tree):
    keys = sorted(key_of(i) for i in range(0, 200, 2))
    # independent: pymerkle's RFC 6962 tree over the same leaves
    pymerkle = pytest.importorskip("pymerkle")
    t = pymerkle.InmemoryTree(algorithm="sha256")
    for k in keys:
        t.append_entry(k.encode("ascii"))
    assert tree.root == t.get_state().hex()
    assert C.key_commitment(reversed(keys)).to_dict() == {"root": tree.root, "size": 100}


def test_every_member_proves_membership(tree):
    for i in range(0, 200, 2):
        proof = tree.prove(key_of(i))
        assert proof["kind"] == "membership"
        assert C.verify_key_proof(proof, tree.root, tree.size) == (key_of(i), True)


def test_every_absent_key_proves_absence(tree):
    for key in _absent_keys(tree):
        proof = tree.prove(key)
        assert proof["kind"] == "non-membership"
        assert C.verify_key_proof(proof, tree.root, tree.size) == (key, False)


def test_empty_tree_proves_absence():
    empty = C.KeyTree([])
    assert empty.root == merkle.root([]).hex()
    assert C.verify_key_proof(empty.prove(key_of(1)), empty.root, 0) == (key_of(1), False)


def test_forged_membership_of_an_absent_key_fails(tree):
    absent = key_of(1)
    present = tree.prove(key_of(0))
    forged = {**present, "key": absent}
    with pytest.raises(C.ProofError) as exc:
        C.verify_key_proof(forged, tree.root, tree.size)
    assert exc.value.check == "inclusion"


def test_forged_absence_of_a_present_key_fails(tree):
    present = key_of(10)
    i = tree.keys.index(present)
    # the neighbours of the real leaf are genuine leaves, but not adjacent: the gap is the key itself
    forged = {
        "_type": C.PROOF_TYPE,
        "kind": "non-membership",
        "key": present,
        "size": tree.size,
        "root": tree.root,
        "predecessor": tree.prove(tree.keys[i - 1]) if i > 0 else None,
        "successor": tree.prove(tree.keys[i + 1]),
    }
    for side in ("predecessor", "successor"):
        if forged[side] is not None:
            forged[side] = {k: forged[side][k] for k in ("key", "index", "audit_path")}
    with pytest.raises(C.ProofError) as exc:
        C.verify_key_proof(forged, tree.root, tree.size)
    assert exc.value.check in ("adjacency", "shape")
    # claiming the successor sits at the predecessor's next index fails the inclusion check
    if forged["predecessor"] is not None:
        lying = copy.deepcopy(forged)
        lying["successor"]["index"] = lying["predecessor"]["index"] + 1
        with pytest.raises(C.ProofError) as exc:
            C.verify_key_proof(lying, tree.root, tree.size)
        assert exc.value.check == "inclusion"
    # dropping a neighbour at the edge is caught too
    edge = copy.deepcopy(forged)
    edge["predecessor"] = None
    with pytest.raises(C.ProofError):
        C.verify_key_proof(edge, tree.root, tree.size)


def test_tampered_audit_path_or_other_root_fails(tree):
    proof = tree.prove(key_of(4))
    bad = copy.deepcopy(proof)
    h = bad["audit_path"][0]
    bad["audit_path"][0] = ("0" if h[0] != "0" else "1") + h[1:]
    with pytest.raises(C.ProofError) as exc:
        C.verify_key_proof(bad, tree.root, tree.size)
    assert exc.value.check == "inclusion"
    other = C.KeyTree(key_of(i) for i in range(300, 310))
    with pytest.raises(C.ProofError) as exc:
        C.verify_key_proof(proof, other.root, other.size)  # trusted root is the other tree's
    assert exc.value.check == "root"
    # rewriting the proof's root to the trusted one does not help
    with pytest.raises(C.ProofError):
        C.verify_key_proof({**proof, "root": other.root, "size": other.size}, other.root, other.size)


def test_disjointness_proof(tree):
    golden = [key_of(i) for i in range(1, 60, 2)]
    proof = tree.prove_disjoint(golden)
    g = C.key_commitment(golden)
    assert C.verify_disjointness(proof, tree.root, tree.size, g.root, g.size) == len(golden)
    with pytest.raises(ValueError, match="golden key"):
        tree.prove_disjoint(golden + [key_of(0)])
    # a proof that omits a golden key no longer matches the trusted golden root
    short = copy.deepcopy(proof)
    short["golden"]["keys"] = short["golden"]["keys"][1:]
    short["proofs"] = short["proofs"][1:]
    with pytest.raises(C.ProofError) as exc:
        C.verify_disjointness(short, tree.root, tree.size, g.root, g.size)
    assert exc.value.check == "golden-root"
    assert C.disjoint_by_merge(tree.keys, golden) == []
    assert C.disjoint_by_merge(tree.keys, golden + [key_of(2)]) == [key_of(2)]


def test_bad_key_is_a_clear_error():
    with pytest.raises(ValueError, match="64 lowercase hex"):
        C.check_key("ABC")


@settings(max_examples=40, deadline=None)
@given(
    members=st.sets(st.integers(0, 60), max_size=25),
    query=st.integers(0, 60),
)
def test_proof_verdict_equals_set_membership(members, query):
    tree = C.KeyTree(key_of(i) for i in members)
    key = key_of(query)
    got = C.verify_key_proof(tree.prove(key), tree.root, tree.size)
    assert got == (key, query in members)


def test_row_commitment_is_order_sensitive():
    rows = [{"messages": [{"role": "user", "content": str(i)}]} for i in range(5)]
    assert C.row_commitment(rows) != C.row_commitment(rows[::-1])
    assert C.row_commitment(rows).size == 5
