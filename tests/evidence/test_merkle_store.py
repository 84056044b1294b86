"""Stored trees (ratchet_stats.merkle_store): built streaming in chunks, proofs read from the file equal the
in-memory MerkleTree's (itself checked against the RFC's recursive definitions) and pymerkle's roots."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pymerkle import InmemoryTree

from ratchet_stats import merkle
from ratchet_stats.merkle_store import StoredTree, TreeBuilder, TreeFileError, leaf_hashes


def _leaves(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed * 7_919 + n)
    return [b"%d:" % i + rng.randbytes(rng.randrange(0, 9)) for i in range(n)]


def _build(path, leaves: list[bytes], base: int, seed: int = 0) -> bytes:
    """Feed the leaf hashes in random-sized chunks (0 included): the file must not depend on the chunking."""
    rng = random.Random(seed)
    builder = TreeBuilder(path, base=base)
    i = 0
    while i < len(leaves):
        step = rng.choice([0, 1, 2, 3, 7, 64, 100])
        builder.add_hashes(leaf_hashes(leaves[i : i + step]))
        i += step
    return builder.finish()


def _block(tree: StoredTree, leaves: list[bytes], index: int) -> bytes:
    lo, hi = tree.block_range(index)
    return leaf_hashes(leaves[lo:hi])


@pytest.mark.parametrize("base", [0, 1, 3, 6])
def test_every_proof_equals_the_in_memory_tree(tmp_path, base):
    for n in [*range(0, 35), 63, 64, 65, 70, 129]:
        leaves = _leaves(n, seed=base)
        path = tmp_path / f"t{n}.bin"
        root = _build(path, leaves, base, seed=n)
        mem = merkle.MerkleTree(leaves)
        assert root == mem.root()
        with StoredTree(path) as tree:
            assert (tree.size, tree.base, tree.root()) == (n, base, mem.root())
            for i in range(n):
                proof = tree.inclusion_proof(i, _block(tree, leaves, i))
                assert proof == mem.inclusion_proof(i)
                assert merkle.verify_inclusion(leaves[i], i, n, proof, root)
            for m in range(0, n + 1):
                block = _block(tree, leaves, m - 1) if m else None
                assert tree.consistency_proof(m, block) == mem.consistency_proof(m)
                assert tree.root(m, block) == mem.root(m)


def test_roots_match_pymerkle_and_the_file_is_compact(tmp_path):
    for n in (1, 63, 64, 65, 1000, 4097):
        leaves = _leaves(n, seed=9)
        oracle = InmemoryTree(algorithm="sha256")
        for leaf in leaves:
            oracle.append_entry(leaf)
        assert _build(tmp_path / "t.bin", leaves, base=6) == oracle.get_root()
    # 4097 leaves at base 6: header + 6 frontier slots + sum_j>=6 floor(n / 2**j) nodes of 32 bytes.
    nodes = sum(4097 >> j for j in range(6, 13))
    assert (tmp_path / "t.bin").stat().st_size == 56 + 6 * 32 + 32 * nodes
    assert TreeBuilder().finish() == merkle.EMPTY_ROOT


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=1, max_value=3000), st.integers(min_value=0, max_value=9), st.data())
def test_random_sizes_bases_and_chunks(tmp_path_factory, n, base, data):
    leaves = _leaves(n, seed=5)
    path = tmp_path_factory.mktemp("t") / "t.bin"
    _build(path, leaves, base, seed=data.draw(st.integers(0, 1000)))
    mem = merkle.MerkleTree(leaves)
    i = data.draw(st.integers(min_value=0, max_value=n - 1))
    m = data.draw(st.integers(min_value=1, max_value=n))
    with StoredTree(path) as tree:
        assert tree.inclusion_proof(i, _block(tree, leaves, i)) == mem.inclusion_proof(i)
        assert tree.consistency_proof(m, _block(tree, leaves, m - 1)) == mem.consistency_proof(m)


def test_a_root_only_builder_keeps_no_leaves():
    builder = TreeBuilder()
    leaves = _leaves(5000, seed=3)
    for i in range(0, 5000, 512):
        builder.add_leaves(leaves[i : i + 512])
    assert builder.finish() == merkle.root(leaves)
    assert builder.size == 5000 and len(builder._carry) <= 14  # one pending hash per level, nothing more


def test_a_missing_or_wrong_block_and_a_damaged_file_say_what_is_wrong(tmp_path):
    leaves = _leaves(200, seed=1)
    path = tmp_path / "t.bin"
    _build(path, leaves, base=4)
    with StoredTree(path) as tree:
        with pytest.raises(ValueError, match="block_range"):
            tree.inclusion_proof(17)
        with pytest.raises(ValueError, match="16 leaf hashes"):
            tree.inclusion_proof(17, leaf_hashes(leaves[16:31]))
        with pytest.raises(ValueError, match="outside"):
            tree.inclusion_proof(200, b"")
    data = path.read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-32])
    with pytest.raises(TreeFileError, match="truncated"):
        StoredTree(tmp_path / "cut.bin")
    (tmp_path / "bad.bin").write_bytes(b"X" + data[1:])
    with pytest.raises(TreeFileError, match="magic"):
        StoredTree(tmp_path / "bad.bin")
    with pytest.raises(ValueError, match="32 bytes"):
        TreeBuilder().add_hashes(b"short")
