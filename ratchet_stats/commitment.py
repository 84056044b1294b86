"""Committed training sets: Merkle commitments that prove what an adapter was, and was not, trained on.

Two RFC 6962/9162 trees per data set, both recorded in the BOM (root hex + size):

- the **key tree**: leaves = the example keys (``ratchet_core.example_key``: 64 lowercase hex chars), sorted
  ascending and unique, each leaf the key's ASCII bytes. Sorted leaves make absence provable;
- the **row tree**: leaves = canonical JSON of each training row (``ratchet_stats.canonical``), in file order.

Proofs (JSON objects, ``_type`` = ``PROOF_TYPE``):

- ``membership``: the key, its index i and the audit path: ``verify_inclusion(key, i, size, path, root)``;
- ``non-membership``: the key plus its neighbours in the sorted key tree: a predecessor at index i and a successor
  at index i + 1 with inclusion proofs, and pred < key < succ (byte order). Because the leaves are sorted, a key
  strictly between two adjacent leaves cannot be a leaf. At the edges: no predecessor means the successor is leaf 0;
  no successor means the predecessor is leaf size - 1; an empty tree (root = SHA-256(b"")) contains nothing;
- ``disjointness``: the golden key list (its sorted-key root and size must equal the golden root recorded in the BOM)
  and one non-membership proof per golden key against the training key tree. The verifier learns the golden keys but
  no training key beyond the neighbours. (When the verifier holds both key lists, the sorted-merge argument is
  simpler: recompute both roots and intersect; ``disjoint_by_merge`` does that.)

A proof is checked against the root and size the caller trusts (taken from a verified BOM), never against the root
written in the proof itself.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ratchet_stats import merkle
from ratchet_stats.canonical import canonical_json
from ratchet_stats.evidence import EvidenceError

PROOF_TYPE = "https://ratchet.dev/training-set-proof/v1"
_KEY = re.compile(r"^[0-9a-f]{64}$")


class ProofError(EvidenceError):
    """A proof does not verify; ``check`` names the failed check (e.g. "root", "inclusion", "order")."""


def check_key(key: str) -> str:
    """Validate an example key (64 lowercase hex chars, as `ratchet proof key` prints) and return it."""
    if not isinstance(key, str) or not _KEY.match(key):
        raise ValueError(
            f"not an example key: {key!r}; expected 64 lowercase hex characters (`ratchet proof key`)"
        )
    return key


def key_leaf(key: str) -> bytes:
    """Leaf data of a key in the key tree: its ASCII bytes (sorting keys sorts leaves)."""
    return check_key(key).encode("ascii")


def sorted_keys(keys: Iterable[str]) -> list[str]:
    """Unique keys in ascending order: the key tree's leaf order."""
    return sorted({check_key(k) for k in keys})


@dataclass(frozen=True)
class Commitment:
    """Root (hex) and size of one tree, as the BOM records it."""

    root: str
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "size": self.size}


def key_commitment(keys: Iterable[str]) -> Commitment:
    """Commitment to a set of example keys: the root over their sorted ASCII leaves."""
    leaves = [key_leaf(k) for k in sorted_keys(keys)]
    return Commitment(merkle.MerkleTree(leaves).root().hex(), len(leaves))


def row_commitment(rows: Iterable[Mapping[str, Any]]) -> Commitment:
    """Commitment to training rows in order: leaf = canonical_json(row)."""
    leaves = [canonical_json(dict(r)) for r in rows]
    return Commitment(merkle.MerkleTree(leaves).root().hex(), len(leaves))


def _leaf_proof(tree: merkle.MerkleTree, keys: Sequence[str], index: int) -> dict[str, Any]:
    return {"key": keys[index], "index": index, "audit_path": [h.hex() for h in tree.inclusion_proof(index)]}


class KeyTree:
    """The sorted key tree of one data set, for producing proofs (keeps the sorted keys and leaves)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = sorted_keys(keys)
        self.leaves = [k.encode("ascii") for k in self.keys]
        self.tree = merkle.MerkleTree(self.leaves)
        self.root = self.tree.root().hex()
        self.size = len(self.leaves)
        self._index = {k: i for i, k in enumerate(self.keys)}

    def __contains__(self, key: str) -> bool:
        return key in self._index

    def prove(self, key: str) -> dict[str, Any]:
        """A membership proof if ``key`` is in the tree, else a non-membership proof."""
        check_key(key)
        head = {"_type": PROOF_TYPE, "key": key, "size": self.size, "root": self.root}
        if key in self._index:
            i = self._index[key]
            return {**head, "kind": "membership", **_leaf_proof(self.tree, self.keys, i)}
        i = bisect.bisect_left(self.keys, key)  # keys[i-1] < key < keys[i]
        pred = _leaf_proof(self.tree, self.keys, i - 1) if i > 0 else None
        succ = _leaf_proof(self.tree, self.keys, i) if i < self.size else None
        return {**head, "kind": "non-membership", "predecessor": pred, "successor": succ}

    def prove_disjoint(self, golden_keys: Iterable[str]) -> dict[str, Any]:
        """Per-key non-membership proofs that no golden key is in this (training) tree.

        Raises ValueError naming a shared key when the sets overlap (then no such proof exists).
        """
        golden = KeyTree(golden_keys)
        shared = [k for k in golden.keys if k in self._index]
        if shared:
            raise ValueError(f"{len(shared)} golden key(s) are in the training set, e.g. {shared[0]}")
        return {
            "_type": PROOF_TYPE,
            "kind": "disjointness",
            "train": {"root": self.root, "size": self.size},
            "golden": {"root": golden.root, "size": golden.size, "keys": golden.keys},
            "proofs": [self.prove(k) for k in golden.keys],
        }


def _check_leaf(entry: Any, size: int, root: bytes, what: str) -> tuple[str, int]:
    if not isinstance(entry, Mapping):
        raise ProofError("shape", f"{what} is not an object")
    try:
        key, index = check_key(entry["key"]), int(entry["index"])
        path = [bytes.fromhex(h) for h in entry["audit_path"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ProofError("shape", f"{what} is malformed: {exc}") from exc
    if not (0 <= index < size) or not merkle.verify_inclusion(key.encode("ascii"), index, size, path, root):
        raise ProofError("inclusion", f"{what} {key} is not leaf {index} of the tree with root {root.hex()}")
    return key, index


def _trusted(root_hex: str, size: int, proof: Mapping[str, Any]) -> bytes:
    if proof.get("_type") != PROOF_TYPE:
        raise ProofError("type", f"_type is {proof.get('_type')!r}, expected {PROOF_TYPE}")
    if proof.get("root") != root_hex or proof.get("size") != size:
        raise ProofError(
            "root",
            f"the proof is for root {proof.get('root')} size {proof.get('size')}, but the trusted tree has root "
            f"{root_hex} size {size}; was it made for another adapter's training set?",
        )
    try:
        return bytes.fromhex(root_hex)
    except ValueError as exc:
        raise ProofError("root", f"trusted root is not hex: {root_hex!r}") from exc


def verify_key_proof(proof: Mapping[str, Any], root_hex: str, size: int) -> tuple[str, bool]:
    """Check a membership or non-membership proof against a trusted key-tree root and size.

    Returns (key, is_member). Raises ProofError naming the failed check.
    """
    if not isinstance(proof, Mapping):
        raise ProofError("shape", "the proof is not a JSON object")
    root = _trusted(root_hex, size, proof)
    try:
        key = check_key(proof.get("key"))  # type: ignore[arg-type]
    except ValueError as exc:
        raise ProofError("shape", str(exc)) from exc
    kind = proof.get("kind")
    if kind == "membership":
        got, _ = _check_leaf(proof, size, root, "the key")
        return got, True
    if kind != "non-membership":
        raise ProofError("shape", f"kind is {kind!r}; expected membership or non-membership")
    pred, succ = proof.get("predecessor"), proof.get("successor")
    if size == 0:
        if pred is not None or succ is not None or root != merkle.root([]):
            raise ProofError("inclusion", "an empty tree has no neighbours and root SHA-256('')")
        return key, False
    if pred is None and succ is None:
        raise ProofError("shape", "a non-empty tree needs a predecessor or a successor")
    lo = _check_leaf(pred, size, root, "predecessor") if pred is not None else None
    hi = _check_leaf(succ, size, root, "successor") if succ is not None else None
    if lo is None and hi is not None and hi[1] != 0:
        raise ProofError("adjacency", f"no predecessor, so the successor must be leaf 0, not leaf {hi[1]}")
    if hi is None and lo is not None and lo[1] != size - 1:
        raise ProofError(
            "adjacency", f"no successor, so the predecessor must be the last leaf, not leaf {lo[1]}"
        )
    if lo is not None and hi is not None and hi[1] != lo[1] + 1:
        raise ProofError("adjacency", f"neighbours at leaves {lo[1]} and {hi[1]} are not adjacent")
    if (lo is not None and not lo[0] < key) or (hi is not None and not key < hi[0]):
        raise ProofError("order", f"{key} does not fall strictly between its claimed neighbours")
    return key, False


def verify_disjointness(
    proof: Mapping[str, Any], train_root: str, train_size: int, golden_root: str, golden_size: int
) -> int:
    """Check that no golden key is in the training key tree; returns the number of golden keys checked.

    The golden key list in the proof must hash to the trusted golden root; each key needs a valid
    non-membership proof against the trusted training root.
    """
    if not isinstance(proof, Mapping) or proof.get("kind") != "disjointness":
        raise ProofError("shape", "not a disjointness proof")
    golden = proof.get("golden") or {}
    try:
        keys = list(golden["keys"])
        commitment = key_commitment(keys)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProofError("shape", f"golden key list malformed: {exc}") from exc
    if keys != sorted_keys(keys):
        raise ProofError("shape", "golden keys must be sorted and unique")
    if commitment.root != golden_root or commitment.size != golden_size:
        raise ProofError(
            "golden-root",
            f"the golden keys hash to {commitment.root} (size {commitment.size}), trusted {golden_root} "
            f"(size {golden_size})",
        )
    proofs = proof.get("proofs")
    if not isinstance(proofs, list) or len(proofs) != len(keys):
        raise ProofError("shape", "one non-membership proof per golden key is required")
    for key, p in zip(keys, proofs, strict=True):
        if not isinstance(p, Mapping) or p.get("key") != key:
            raise ProofError("shape", f"proofs must follow the golden key order; expected {key}")
        _, member = verify_key_proof(p, train_root, train_size)
        if member:
            raise ProofError("disjoint", f"golden key {key} IS in the training set")
    return len(keys)


def disjoint_by_merge(train_keys: Sequence[str], golden_keys: Sequence[str]) -> list[str]:
    """The sorted-merge argument for a verifier holding both key lists: the shared keys (empty = disjoint).

    Callers first check each list's ``key_commitment`` against the roots recorded in the BOM.
    """
    a, b = sorted_keys(train_keys), sorted_keys(golden_keys)
    i = j = 0
    shared: list[str] = []
    while i < len(a) and j < len(b):
        if a[i] == b[j]:
            shared.append(a[i])
            i += 1
            j += 1
        elif a[i] < b[j]:
            i += 1
        else:
            j += 1
    return shared
