"""Merkle benchmark: root of 1,000,000 leaves, inclusion and consistency proofs with verification (RFC 9162).

Leaves are 32-byte values from a seeded RNG (a training set's example keys look like this). Reports seconds
for the build (leaf hashes + levels), proofs and verifications, and the root hex so runs can be compared.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from ratchet_stats import merkle

N_LEAVES = 1_000_000
OLD_SIZE = 750_000
SEED = 20250101


def run(out_dir: Path, n: int = N_LEAVES, old_size: int = OLD_SIZE) -> dict[str, Any]:
    rng = random.Random(SEED)
    leaves = [rng.randbytes(32) for _ in range(n)]

    started = time.perf_counter()
    tree = merkle.MerkleTree(leaves)
    root = tree.root()
    build_s = time.perf_counter() - started

    indices = [0, 1, n // 3, old_size - 1, n - 1]
    inclusion = []
    for index in indices:
        t0 = time.perf_counter()
        proof = tree.inclusion_proof(index)
        t1 = time.perf_counter()
        ok = merkle.verify_inclusion(leaves[index], index, n, proof, root)
        t2 = time.perf_counter()
        inclusion.append(
            {"index": index, "proof_len": len(proof), "prove_s": t1 - t0, "verify_s": t2 - t1, "verified": ok}
        )

    t0 = time.perf_counter()
    old_root = tree.root(old_size)
    consistency = tree.consistency_proof(old_size)
    t1 = time.perf_counter()
    consistent = merkle.verify_consistency(old_size, n, old_root, root, consistency)
    t2 = time.perf_counter()

    all_ok = consistent and all(row["verified"] for row in inclusion)
    return {
        "n_leaves": n,
        "root": root.hex(),
        "build_s": round(build_s, 4),
        "inclusion": inclusion,
        "consistency": {
            "old_size": old_size,
            "old_root": old_root.hex(),
            "proof_len": len(consistency),
            "prove_s": t1 - t0,
            "verify_s": t2 - t1,
            "verified": consistent,
        },
        "summary": {
            "n_leaves": n,
            "root_s": round(build_s, 3),
            "inclusion_prove_ms_max": round(1000 * max(r["prove_s"] for r in inclusion), 3),
            "inclusion_verify_ms_max": round(1000 * max(r["verify_s"] for r in inclusion), 3),
            "consistency_prove_ms": round(1000 * (t1 - t0), 3),
            "consistency_verify_ms": round(1000 * (t2 - t1), 3),
            "all_verified": all_ok,
            "root": root.hex()[:16],
        },
    }
