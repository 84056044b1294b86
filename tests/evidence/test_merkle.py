"""RFC 9162 Merkle trees against two oracles: pymerkle (roots) and the RFC's own recursive definitions (proofs)."""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from ratchet_stats import merkle


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed * 1_000_003 + n)
    return [b"%d:" % i + rng.randbytes(rng.randrange(0, 12)) for i in range(n)]


class RfcOracle:
    """RFC 9162 §2.1.1, §2.1.3.1 and §2.1.4.1 written literally (recursive), over the leaves themselves."""

    def __init__(self, leaves: list[bytes]) -> None:
        self.d = leaves
        self.mth = lru_cache(maxsize=None)(self._mth)

    @staticmethod
    def _k(n: int) -> int:
        k = 1
        while k * 2 < n:
            k *= 2
        return k

    def _mth(self, lo: int, hi: int) -> bytes:
        n = hi - lo
        if n == 0:
            return hashlib.sha256(b"").digest()
        if n == 1:
            return hashlib.sha256(b"\x00" + self.d[lo]).digest()
        k = self._k(n)
        return hashlib.sha256(b"\x01" + self.mth(lo, lo + k) + self.mth(lo + k, hi)).digest()

    def path(self, m: int, lo: int, hi: int) -> list[bytes]:
        n = hi - lo
        if n == 1:
            return []
        k = self._k(n)
        if m < k:
            return self.path(m, lo, lo + k) + [self.mth(lo + k, hi)]
        return self.path(m - k, lo + k, hi) + [self.mth(lo, lo + k)]

    def subproof(self, m: int, lo: int, hi: int, b: bool) -> list[bytes]:
        n = hi - lo
        if m == n:
            return [] if b else [self.mth(lo, hi)]
        k = self._k(n)
        if m <= k:
            return self.subproof(m, lo, lo + k, b) + [self.mth(lo + k, hi)]
        return self.subproof(m - k, lo + k, hi, False) + [self.mth(lo, lo + k)]


def _pymerkle_root(leaves: list[bytes]) -> bytes:
    tree = InmemoryTree(algorithm="sha256")  # security on: 0x00 / 0x01 prefixes as RFC 6962
    assert tree.leaf_prefix == b"\x00" and tree.node_prefix == b"\x01"
    for leaf in leaves:
        tree.append_entry(leaf)
    return tree.get_root()


@pytest.mark.parametrize("n", [*range(0, 65), 100, 127, 128, 129, 1000])
def test_root_matches_pymerkle(n):
    leaves = _leaves(n)
    assert merkle.root(leaves) == _pymerkle_root(leaves)


def test_empty_tree_and_leaf_vectors():
    assert merkle.root([]).hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert merkle.root([b""]) == hashlib.sha256(b"\x00").digest()
    a, b = merkle.leaf_hash(b"a"), merkle.leaf_hash(b"b")
    assert merkle.root([b"a", b"b"]) == hashlib.sha256(b"\x01" + a + b).digest()
    # Domain separation: the concatenation of two leaf hashes as one leaf is not the two-leaf tree.
    assert merkle.root([a + b]) != merkle.root([b"a", b"b"])


def test_all_proofs_for_sizes_up_to_64_match_the_rfc_and_verify():
    leaves = _leaves(64, seed=1)
    tree = merkle.MerkleTree(leaves)
    oracle = RfcOracle(leaves)
    for n in range(1, 65):
        root_n = oracle.mth(0, n)
        assert tree.root(n) == root_n
        sub = merkle.MerkleTree(leaves[:n])
        for i in range(n):
            proof = sub.inclusion_proof(i)
            assert proof == oracle.path(i, 0, n) == tree.inclusion_proof(i, n)
            assert merkle.verify_inclusion(leaves[i], i, n, proof, root_n)
        for m in range(0, n + 1):
            proof = sub.consistency_proof(m)
            expected = [] if m in (0, n) else oracle.subproof(m, 0, n, True)
            assert proof == expected == tree.consistency_proof(m, n)
            assert merkle.verify_consistency(m, n, oracle.mth(0, m), root_n, proof)


def _flips(value: bytes):
    for i in range(len(value)):
        for bit in range(8):
            yield value[:i] + bytes([value[i] ^ (1 << bit)]) + value[i + 1 :]


def test_inclusion_tampering_fails_exhaustively():
    leaves = _leaves(12, seed=2)
    tree = merkle.MerkleTree(leaves)
    for n in range(1, 13):
        root = tree.root(n)
        for i in range(n):
            proof = tree.inclusion_proof(i, n)
            assert merkle.verify_inclusion(leaves[i], i, n, proof, root)
            for j, element in enumerate(proof):
                for flipped in _flips(element):
                    assert not merkle.verify_inclusion(
                        leaves[i], i, n, [*proof[:j], flipped, *proof[j + 1 :]], root
                    )
            for flipped in _flips(root):
                assert not merkle.verify_inclusion(leaves[i], i, n, proof, flipped)
            for flipped in _flips(leaves[i]):
                assert not merkle.verify_inclusion(flipped, i, n, proof, root)
            for other in range(n + 2):
                if other != i:
                    assert not merkle.verify_inclusion(leaves[i], other, n, proof, root)
            # Another size (with that size's true root, as a signed tree head would give it).
            for other_n in range(1, 14):
                if other_n != n and other_n <= 12:
                    assert not merkle.verify_inclusion(leaves[i], i, other_n, proof, tree.root(other_n))
            assert not merkle.verify_inclusion(leaves[i], i, n, [*proof, proof[0]] if proof else [root], root)
            if proof:
                assert not merkle.verify_inclusion(leaves[i], i, n, proof[:-1], root)


def test_consistency_tampering_fails_exhaustively():
    leaves = _leaves(12, seed=3)
    tree = merkle.MerkleTree(leaves)
    for n in range(1, 13):
        for m in range(1, n + 1):
            proof, old, new = tree.consistency_proof(m, n), tree.root(m), tree.root(n)
            assert merkle.verify_consistency(m, n, old, new, proof)
            for j, element in enumerate(proof):
                for flipped in _flips(element):
                    assert not merkle.verify_consistency(
                        m, n, old, new, [*proof[:j], flipped, *proof[j + 1 :]]
                    )
            for flipped in _flips(old):
                assert not merkle.verify_consistency(m, n, flipped, new, proof)
            for flipped in _flips(new):
                assert not merkle.verify_consistency(m, n, old, flipped, proof)
            for m2 in range(1, 13):
                for n2 in range(m2, 13):
                    if (m2, n2) != (m, n) and tree.consistency_proof(m2, n2) != proof:
                        assert not merkle.verify_consistency(m2, n2, tree.root(m2), tree.root(n2), proof)
            if proof:
                assert not merkle.verify_consistency(m, n, old, new, proof[:-1])
            assert not merkle.verify_consistency(m, n, old, new, [*proof, new])
    # The empty tree is a prefix of every tree, but only as SHA-256() with an empty proof.
    assert merkle.verify_consistency(0, 5, merkle.EMPTY_ROOT, tree.root(5), [])
    assert not merkle.verify_consistency(0, 5, tree.root(1), tree.root(5), [])
    assert not merkle.verify_consistency(5, 4, tree.root(5), tree.root(4), [])


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=1, max_value=600), st.data())
def test_random_sizes_match_the_rfc(n, data):
    leaves = _leaves(n, seed=4)
    oracle, tree = RfcOracle(leaves), merkle.MerkleTree(leaves)
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    m = data.draw(st.integers(min_value=1, max_value=n))
    assert tree.root() == oracle.mth(0, n)
    assert tree.inclusion_proof(i) == oracle.path(i, 0, n)
    assert merkle.verify_inclusion(leaves[i], i, n, tree.inclusion_proof(i), tree.root())
    expected = [] if m == n else oracle.subproof(m, 0, n, True)
    assert tree.consistency_proof(m) == expected
    assert merkle.verify_consistency(m, n, tree.root(m), tree.root(), expected)


def test_module_functions_follow_changes_to_the_leaves():
    leaves = _leaves(9, seed=5)
    first = merkle.root(leaves)
    leaves[3] = b"changed"
    assert merkle.root(leaves) != first
    assert merkle.root(leaves) == _pymerkle_root(leaves)
    proof = merkle.inclusion_proof(leaves, 3)
    assert merkle.verify_inclusion(b"changed", 3, 9, proof, merkle.root(leaves))
    assert merkle.consistency_proof(leaves, 9) == []
    merkle.clear_cache()


def test_bad_arguments():
    tree = merkle.MerkleTree(_leaves(5))
    with pytest.raises(ValueError, match="outside"):
        tree.inclusion_proof(5)
    with pytest.raises(ValueError, match="outside"):
        tree.consistency_proof(6)
    with pytest.raises(TypeError, match="bytes"):
        merkle.MerkleTree(["text"])
    root = tree.root()
    assert not merkle.verify_inclusion(b"x", -1, 5, [], root)
    assert not merkle.verify_inclusion("text", 0, 1, [], root)
    assert not merkle.verify_inclusion_hash(root, 0, 1, [b"short"], root)
    assert not merkle.verify_consistency(1, 2, root, root, ["not bytes"])
    assert merkle.MerkleTree.from_leaf_hashes([merkle.leaf_hash(x) for x in _leaves(5)]).root() == root
