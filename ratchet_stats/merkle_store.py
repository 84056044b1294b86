"""Stored RFC 9162 Merkle trees: built streaming from leaf hashes, kept as a compact file of level hashes, from
which inclusion and consistency proofs are read in ``O(log n)`` without the leaves or a rebuild.

A day's receipt commits to millions of rows. Holding every leaf hash (and the ~2n node hashes) in memory to
answer one proof is what made a proof cost seconds. :class:`TreeBuilder` takes leaf hashes in chunks of any size
and keeps one pending hash per level (``O(log n)`` memory beyond the chunk); with a path it also writes, for every
level ``j >= base``, the hashes of the complete aligned subtrees of ``2**j`` leaves (the nodes
:class:`ratchet_stats.merkle.MerkleTree` keeps), plus the *frontier*: for each level ``j < base`` where bit ``j``
of ``n`` is set, the right-edge subtree that the root folds in.

:class:`StoredTree` reads that file with ``os.pread``: a stored node is one 32-byte read. The nodes below ``base``
that a proof needs lie inside one ``2**base``-leaf *block* (``block_range``: the proven index's, or
``old_size - 1``'s for a consistency proof) whose leaf hashes the caller passes in (the receipt reads them from
the row group that holds the row itself), or on the tree's right edge (the frontier). A proof therefore costs
``O(log n)`` reads plus at most ``2**base`` hashes, and it is the same list of hashes ``MerkleTree`` gives (one
implementation of ``PATH``/``PROOF``: ``merkle.audit_path``/``merkle.consistency_path``, RFC 9162 §2.1.3.1,
§2.1.4.1). Storage is ``~64 n / 2**base`` bytes: 10 MB for 10M leaves at the default base 6.

File layout (integers big-endian)::

    magic     b"RFC9162\\x01"                                   8 bytes
    size      n                                                u64
    base      b (levels below b are not stored)                u8, then 7 zero bytes
    root      MTH(D[n])                                        32 bytes
    frontier  for j = 0 .. b-1: level j's last complete node   b x 32 bytes (zeros where bit j of n is 0)
              when bit j of n is set
    levels    for j = b, b+1, ...: the floor(n / 2**j) complete nodes of level j, left to right, 32 bytes each
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from ratchet_stats.merkle import EMPTY_ROOT, HASH_SIZE, audit_path, consistency_path, fold_cover, node_hash

__all__ = ["DEFAULT_BASE", "MAGIC", "StoredTree", "TreeBuilder", "TreeFileError", "leaf_hashes"]

MAGIC = b"RFC9162\x01"
DEFAULT_BASE = 6  # blocks of 64 leaves: ~1 byte of file per leaf, <= 127 hashes to finish a proof
_HEADER = struct.Struct(">8sQB7x32s")
_sha256 = hashlib.sha256


class TreeFileError(ValueError):
    """The tree file is not one :class:`TreeBuilder` wrote (or was cut short); the message says which file."""


def leaf_hashes(leaves: Iterable[bytes]) -> bytes:
    """The concatenated RFC 9162 leaf hashes ``SHA-256(0x00 || d)`` of `leaves` (entries' bytes)."""
    return b"".join([_sha256(b"\x00" + d).digest() for d in leaves])


def _pair_up(level: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)`` of each consecutive pair of 32-byte hashes (an even count)."""
    return b"".join([_sha256(b"\x01" + level[i : i + 64]).digest() for i in range(0, len(level), 64)])


class TreeBuilder:
    """An RFC 9162 tree built from leaf hashes appended in order, in chunks; memory ``O(chunk + log n)``.

    ``TreeBuilder()`` only computes the root; ``TreeBuilder(path)`` also writes the tree file on ``finish()``
    (levels are spooled to temporary files beside it, then joined under a temporary name and renamed).
    """

    def __init__(self, path: str | Path | None = None, base: int = DEFAULT_BASE) -> None:
        if not isinstance(base, int) or not 0 <= base <= 32:
            raise ValueError(f"base level must be an int in 0..32, got {base!r}")
        self.path = Path(path) if path is not None else None
        self.base = base
        self.size = 0
        self._carry: list[bytes] = []  # per level: b"" or the one node still waiting for its right sibling
        self._spool: dict[int, BinaryIO] = {}
        self._root: bytes | None = None

    def add_leaves(self, leaves: Iterable[bytes]) -> None:
        """Append entries (their bytes; hashed here as leaves)."""
        self.add_hashes(leaf_hashes(leaves))

    def add_hashes(self, hashes: bytes | Iterable[bytes]) -> None:
        """Append leaf hashes, concatenated (``bytes`` of a multiple of 32) or as an iterable of 32-byte hashes."""
        if self._root is not None:
            raise RuntimeError("the tree is finished; start a new TreeBuilder")
        new = hashes if isinstance(hashes, bytes | bytearray) else b"".join(hashes)
        if len(new) % HASH_SIZE:
            raise ValueError("leaf hashes must be 32 bytes each")
        self.size += len(new) // HASH_SIZE
        level = 0
        while new:
            if level == len(self._carry):
                self._carry.append(b"")
            if self.path is not None and level >= self.base:
                self._spool_file(level).write(new)
            buf = self._carry[level] + new
            pairs = len(buf) // (2 * HASH_SIZE)
            self._carry[level] = buf[2 * HASH_SIZE * pairs :]
            new = _pair_up(buf[: 2 * HASH_SIZE * pairs])
            level += 1

    def _spool_file(self, level: int) -> BinaryIO:
        f = self._spool.get(level)
        if f is None:
            assert self.path is not None
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Held open across add_hashes calls; closed (and so deleted) by finish() or close().
            f = tempfile.TemporaryFile(dir=self.path.parent, prefix=".tree-level-")  # noqa: SIM115
            self._spool[level] = f
        return f

    def root(self) -> bytes:
        """MTH of the leaves so far: the right fold of the pending nodes (RFC 9162 §2.1.1's recursion)."""
        acc: bytes | None = None
        for node in self._carry:  # lowest level first: the rightmost, smallest subtree
            if node:
                acc = node if acc is None else node_hash(node, acc)
        return EMPTY_ROOT if acc is None else acc

    def finish(self) -> bytes:
        """The root; with a path, the tree file is written (atomically) before it returns."""
        if self._root is not None:
            return self._root
        root = self.root()
        if self.path is not None:
            frontier = b"".join(
                (self._carry[j] if j < len(self._carry) and self._carry[j] else bytes(HASH_SIZE))
                for j in range(self.base)
            )
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as out:
                out.write(_HEADER.pack(MAGIC, self.size, self.base, root))
                out.write(frontier)
                for level in sorted(self._spool):
                    f = self._spool[level]
                    f.seek(0)
                    shutil.copyfileobj(f, out, 1 << 20)
                    f.close()
                out.flush()
                os.fsync(out.fileno())
            tmp.replace(self.path)
            self._spool.clear()
        self._root = root
        return root

    def close(self) -> None:
        """Drop the spool files without writing the tree (after an error)."""
        for f in self._spool.values():
            f.close()
        self._spool.clear()


class StoredTree:
    """A tree file :class:`TreeBuilder` wrote, read node by node; proofs equal ``MerkleTree``'s."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_RDONLY)
        try:
            head = os.pread(self._fd, _HEADER.size, 0)
            if len(head) != _HEADER.size:
                raise TreeFileError(f"{self.path}: too short for a tree file header")
            magic, self.size, self.base, self._root = _HEADER.unpack(head)
            if magic != MAGIC:
                raise TreeFileError(f"{self.path}: not a Ratchet Merkle tree file (magic {magic!r})")
            self._frontier = os.pread(self._fd, HASH_SIZE * self.base, _HEADER.size)
            self._offsets: dict[int, int] = {}
            offset = _HEADER.size + HASH_SIZE * self.base
            level = self.base
            while self.size >> level:
                self._offsets[level] = offset
                offset += HASH_SIZE * (self.size >> level)
                level += 1
            if os.fstat(self._fd).st_size != offset:
                raise TreeFileError(
                    f"{self.path}: {os.fstat(self._fd).st_size} bytes, a tree of {self.size} leaves at base "
                    f"{self.base} has {offset} (truncated or not written by TreeBuilder); rebuild it"
                )
        except BaseException:
            os.close(self._fd)
            raise

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> StoredTree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self.size

    def block_range(self, index: int) -> tuple[int, int]:
        """Leaves ``[lo, hi)`` whose hashes a proof about `index` needs (its ``2**base``-leaf block)."""
        if not 0 <= index < self.size:
            raise ValueError(f"leaf index {index!r} is outside 0..{self.size - 1}")
        lo = (index >> self.base) << self.base
        return lo, min(lo + (1 << self.base), self.size)

    def root(self, size: int | None = None, block: Sequence[bytes] | bytes | None = None) -> bytes:
        """MTH of the first `size` leaves (default all); a prefix not ending on a block boundary needs the leaf
        hashes of ``block_range(size - 1)``."""
        n = self._check_size(size)
        if n == self.size:
            return self._root
        return fold_cover(self._reader(block, n - 1 if n else None), 0, n)

    def inclusion_proof(
        self, index: int, block: Sequence[bytes] | bytes | None = None, size: int | None = None
    ) -> list[bytes]:
        """RFC 9162 §2.1.3.1 ``PATH(index, D[size])``; `block`: the leaf hashes of ``block_range(index)``
        (not needed at base 0)."""
        n = self._check_size(size)
        if not isinstance(index, int) or not 0 <= index < n:
            raise ValueError(f"leaf index {index!r} is outside 0..{n - 1} for a tree of size {n}")
        node = self._reader(block, index)
        return audit_path(lambda lo, hi: fold_cover(node, lo, hi), index, n)

    def consistency_proof(
        self, old_size: int, block: Sequence[bytes] | bytes | None = None, new_size: int | None = None
    ) -> list[bytes]:
        """RFC 9162 §2.1.4.1 ``PROOF(old_size, D[new_size])``; `block`: the leaf hashes of
        ``block_range(old_size - 1)`` when `old_size` does not end on a block boundary."""
        n = self._check_size(new_size)
        if not isinstance(old_size, int) or not 0 <= old_size <= n:
            raise ValueError(f"old size {old_size!r} is outside 0..{n}")
        if old_size in (0, n):
            return []
        node = self._reader(block, old_size - 1)
        return consistency_path(lambda lo, hi: fold_cover(node, lo, hi), old_size, n)

    def _check_size(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not isinstance(size, int) or not 0 <= size <= self.size:
            raise ValueError(f"tree size {size!r} is outside 0..{self.size}")
        return size

    def _stored(self, level: int, index: int) -> bytes:
        data = os.pread(self._fd, HASH_SIZE, self._offsets[level] + HASH_SIZE * index)
        if len(data) != HASH_SIZE:
            raise TreeFileError(f"{self.path}: cut short at level {level}")
        return data

    def _reader(self, block: Sequence[bytes] | bytes | None, index: int | None):
        """``node(level, i)`` over the stored levels, the frontier and (below base) the block of `index`."""
        levels: list[bytes] = []
        lo = 0
        if block is not None and index is not None and self.base:
            lo, hi = self.block_range(index)
            level0 = block if isinstance(block, bytes | bytearray) else b"".join(block)
            if len(level0) != HASH_SIZE * (hi - lo):
                raise ValueError(
                    f"block of leaf {index} must hold the {hi - lo} leaf hashes of leaves {lo}..{hi - 1}, "
                    f"got {len(level0) / HASH_SIZE:g}"
                )
            levels.append(bytes(level0))
            while len(levels[-1]) >= 2 * HASH_SIZE:
                levels.append(_pair_up(levels[-1][: len(levels[-1]) // 64 * 64]))

        def node(level: int, i: int) -> bytes:
            if level >= self.base:
                return self._stored(level, i)
            rel = i - (lo >> level)
            if level < len(levels) and 0 <= rel < len(levels[level]) // HASH_SIZE:
                return levels[level][HASH_SIZE * rel : HASH_SIZE * (rel + 1)]
            if i == (self.size >> level) - 1 and (self.size >> level) & 1:
                return self._frontier[HASH_SIZE * level : HASH_SIZE * (level + 1)]
            raise ValueError(
                f"the proof needs leaf hashes of block {((i << level) >> self.base) << self.base} "
                f"(pass block= the hashes of block_range(...)); base level {self.base} is not stored"
            )

        return node
