"""RFC 9162 (Certificate Transparency v2, same tree as RFC 6962) Merkle trees: roots, inclusion and consistency
proofs, and their verification.

Definitions (RFC 9162 §2.1.1), SHA-256 throughout::

    MTH({})       = SHA-256()                                       (the empty tree)
    MTH({d0})     = SHA-256(0x00 || d0)                             (leaf hash)
    MTH(D[n])     = SHA-256(0x01 || MTH(D[0:k]) || MTH(D[k:n]))     k = largest power of two < n

Implementation: a :class:`MerkleTree` keeps one contiguous byte string per level ``j`` holding the hashes of
the complete, aligned subtrees of ``2**j`` leaves (``levels[j][i]`` covers leaves ``[i*2**j, (i+1)*2**j)``).
Every node the RFC definitions ask for, for any tree size up to the tree's own, is either such a subtree or the
right fold of the aligned subtrees covering its range, so roots of any prefix, inclusion proofs (``PATH``,
§2.1.3.1) and consistency proofs (``PROOF``/``SUBPROOF``, §2.1.4.1) are computed iteratively from those levels
in ``O(log^2 n)`` hashes after one ``~2n``-hash build (``fold_cover``, ``audit_path`` and ``consistency_path``
work over any source of those subtrees: ``ratchet_stats.merkle_store`` reads them from a file). Verification
follows the iterative algorithms of §2.1.3.2 and §2.1.4.2 and never needs the leaves.

Indices are 0-based. Leaves are the entries' bytes; ``verify_inclusion`` takes the entry's bytes too (use
``verify_inclusion_hash`` when you hold only its leaf hash). Hashes are raw 32-byte ``bytes``; use ``.hex()``.

Reference: RFC 9162 §2.1, https://www.rfc-editor.org/rfc/rfc9162#section-2.1.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MerkleTree",
    "audit_path",
    "clear_cache",
    "consistency_path",
    "consistency_proof",
    "fold_cover",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root",
    "verify_consistency",
    "verify_inclusion",
    "verify_inclusion_hash",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_sha256 = hashlib.sha256


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)`` (RFC 9162 §2.1.1)."""
    return _sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)`` (RFC 9162 §2.1.1)."""
    return _sha256(b"\x01" + left + right).digest()


def _largest_power_of_two_below(n: int) -> int:
    """The k of RFC 9162 §2.1.1: the largest power of two strictly smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def fold_cover(node: Callable[[int, int], bytes], lo: int, hi: int) -> bytes:
    """MTH(D[lo:hi]) for a range the RFC recursion produces (lo aligned to a power of two >= hi - lo), from the
    aligned complete subtrees ``node(level, index)`` (covering leaves ``[index * 2**level, (index+1) * 2**level)``).

    Greedy cover by the largest aligned complete subtrees, folded right to left: the RFC tree over such a
    range is exactly that fold (its left child is always the largest power-of-two block).
    """
    if hi <= lo:
        return EMPTY_ROOT
    parts: list[bytes] = []
    while lo < hi:
        level = (hi - lo).bit_length() - 1
        if lo:
            level = min(level, (lo & -lo).bit_length() - 1)
        parts.append(node(level, lo >> level))
        lo += 1 << level
    acc = parts[-1]
    for part in reversed(parts[:-1]):
        acc = node_hash(part, acc)
    return acc


def audit_path(mth: Callable[[int, int], bytes], index: int, n: int) -> list[bytes]:
    """RFC 9162 §2.1.3.1 ``PATH(index, D[n])`` (iterative, leaf side first) over any ``mth(lo, hi)`` source."""
    top_down: list[bytes] = []
    lo, hi, m = 0, n, index
    while hi - lo > 1:  # PATH(m, D[n]) = PATH(m, D[0:k]) : MTH(D[k:n])  or  PATH(m-k, D[k:n]) : MTH(D[0:k])
        k = _largest_power_of_two_below(hi - lo)
        if m < k:
            top_down.append(mth(lo + k, hi))
            hi = lo + k
        else:
            top_down.append(mth(lo, lo + k))
            lo += k
            m -= k
    top_down.reverse()
    return top_down


def consistency_path(mth: Callable[[int, int], bytes], old_size: int, n: int) -> list[bytes]:
    """RFC 9162 §2.1.4.1 ``PROOF(old_size, D[n])`` = ``SUBPROOF(m, D[n], true)`` (iterative) over any
    ``mth(lo, hi)`` source; empty when ``old_size`` is 0 or ``n``."""
    if old_size in (0, n):
        return []
    collected: list[bytes] = []
    lo, hi, m, complete = 0, n, old_size, True
    while True:
        if hi - lo == m:  # SUBPROOF(m, D[m], true) = {} ; SUBPROOF(m, D[m], false) = {MTH(D[m])}
            if not complete:
                collected.append(mth(lo, hi))
            break
        k = _largest_power_of_two_below(hi - lo)
        if m <= k:  # SUBPROOF(m, D[0:k], b) : MTH(D[k:n])
            collected.append(mth(lo + k, hi))
            hi = lo + k
        else:  # SUBPROOF(m - k, D[k:n], false) : MTH(D[0:k])
            collected.append(mth(lo, lo + k))
            lo += k
            m -= k
            complete = False
    collected.reverse()
    return collected


class MerkleTree:
    """An RFC 9162 Merkle tree over a fixed list of entries; proofs for it and for any of its prefixes."""

    __slots__ = ("_levels", "size")

    def __init__(self, leaves: Iterable[bytes] = ()) -> None:
        try:
            level0 = b"".join([_sha256(b"\x00" + d).digest() for d in leaves])
        except TypeError:
            raise TypeError(
                "Merkle leaves must be bytes; encode text first, e.g. key.encode('utf-8')"
            ) from None
        self._build(level0)

    @classmethod
    def from_leaf_hashes(cls, hashes: Iterable[bytes]) -> MerkleTree:
        """A tree whose leaf hashes (already ``SHA-256(0x00 || d)``) are given."""
        tree = cls.__new__(cls)
        hashes = list(hashes)
        if any(len(h) != HASH_SIZE for h in hashes):
            raise ValueError("every leaf hash must be 32 bytes")
        tree._build(b"".join(hashes))
        return tree

    def _build(self, level0: bytes) -> None:
        self.size = len(level0) // HASH_SIZE
        levels = [level0]
        current = level0
        while len(current) >= 2 * HASH_SIZE:
            pairs = len(current) // (2 * HASH_SIZE)
            sha = _sha256
            current = b"".join(
                [sha(b"\x01" + current[i : i + 64]).digest() for i in range(0, 64 * pairs, 64)]
            )
            levels.append(current)
        self._levels = levels

    def __len__(self) -> int:
        return self.size

    def _node(self, level: int, index: int) -> bytes:
        start = index * HASH_SIZE
        return self._levels[level][start : start + HASH_SIZE]

    def _mth(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) for a range the RFC recursion produces (see :func:`fold_cover`)."""
        return fold_cover(self._node, lo, hi)

    def _check_size(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not isinstance(size, int) or not 0 <= size <= self.size:
            raise ValueError(f"tree size {size!r} is outside 0..{self.size}")
        return size

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first `size` entries (default: all); ``SHA-256()`` for the empty tree."""
        return self._mth(0, self._check_size(size))

    def leaf_hash(self, index: int) -> bytes:
        """The leaf hash of entry `index`."""
        if not 0 <= index < self.size:
            raise IndexError(f"leaf index {index} is outside 0..{self.size - 1}")
        return self._node(0, index)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.3.1 ``PATH(index, D[size])``: the audit path, leaf side first."""
        n = self._check_size(size)
        if not isinstance(index, int) or not 0 <= index < n:
            raise ValueError(f"leaf index {index!r} is outside 0..{n - 1} for a tree of size {n}")
        return audit_path(self._mth, index, n)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """RFC 9162 §2.1.4.1 ``PROOF(old_size, D[new_size])`` = ``SUBPROOF(m, D[n], true)``; empty when
        ``old_size`` is 0 or equals ``new_size``."""
        n = self._check_size(new_size)
        if not isinstance(old_size, int) or not 0 <= old_size <= n:
            raise ValueError(f"old size {old_size!r} is outside 0..{n}")
        return consistency_path(self._mth, old_size, n)


# One cached tree: callers often ask root(leaves) then several proofs over the same leaves.
_CACHE: tuple[tuple[bytes, ...], MerkleTree] | None = None


def _tree(leaves: Sequence[bytes]) -> MerkleTree:
    global _CACHE
    key = tuple(leaves)
    cached = _CACHE
    if cached is not None and cached[0] == key:
        return cached[1]
    tree = MerkleTree(key)
    _CACHE = (key, tree)
    return tree


def clear_cache() -> None:
    """Drop the cached tree the module-level functions keep (frees its memory)."""
    global _CACHE
    _CACHE = None


def root(leaves: Sequence[bytes]) -> bytes:
    """MTH(leaves) (RFC 9162 §2.1.1); ``SHA-256()`` for no leaves."""
    return _tree(leaves).root()


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of ``leaves[index]`` in the tree of all `leaves` (RFC 9162 §2.1.3.1)."""
    return _tree(leaves).inclusion_proof(index)


def consistency_proof(leaves: Sequence[bytes], old_size: int) -> list[bytes]:
    """Proof that the tree of ``leaves[:old_size]`` is a prefix of the tree of all `leaves` (RFC 9162 §2.1.4.1)."""
    return _tree(leaves).consistency_proof(old_size)


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes | bytearray) and len(value) == HASH_SIZE


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def verify_inclusion_hash(
    leaf_hash_: bytes, index: int, size: int, proof: Sequence[bytes], root_: bytes
) -> bool:
    """RFC 9162 §2.1.3.2: does `proof` show a leaf with hash `leaf_hash_` at `index` in the tree (size, root)?"""
    if not (
        _is_count(index) and _is_count(size) and index < size and _is_hash(leaf_hash_) and _is_hash(root_)
    ):
        return False
    if not isinstance(proof, Sequence) or not all(_is_hash(p) for p in proof):
        return False
    fn, sn = index, size - 1
    r = bytes(leaf_hash_)
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(bytes(p), r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, bytes(p))
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(r, bytes(root_))


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root_: bytes) -> bool:
    """Does `proof` show the entry `leaf` (its bytes, not its hash) at `index` in the tree (size, root)?"""
    if not isinstance(leaf, bytes | bytearray | memoryview):
        return False
    return verify_inclusion_hash(leaf_hash(bytes(leaf)), index, size, proof, root_)


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: does `proof` show the tree (old_size, old_root) is a prefix of (new_size, new_root)?

    Edge cases as transparency-dev/merkle: equal sizes need an empty proof and equal roots; the empty tree
    (old_size 0, root ``SHA-256()``) is a prefix of every tree with an empty proof.
    """
    if not (_is_count(old_size) and _is_count(new_size) and old_size <= new_size):
        return False
    if not (_is_hash(old_root) and _is_hash(new_root)):
        return False
    if not isinstance(proof, Sequence) or not all(_is_hash(p) for p in proof):
        return False
    old_root, new_root = bytes(old_root), bytes(new_root)
    if old_size == new_size:
        return len(proof) == 0 and hmac.compare_digest(old_root, new_root)
    if old_size == 0:
        return len(proof) == 0 and hmac.compare_digest(old_root, EMPTY_ROOT)
    if len(proof) == 0:
        return False
    path = [bytes(p) for p in proof]
    if old_size & (old_size - 1) == 0:  # an exact power of two: the verifier already knows that node
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)
