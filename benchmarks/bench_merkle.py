"""Merkle benchmark (RFC 9162): a tree of 1,000,000 leaves built in memory and streamed into a stored tree file
(``ratchet_stats.merkle_store``), inclusion and consistency proofs from each, with verification.

Leaves are 32-byte values, ``SHA-256("<seed>:<i>")`` (a training set's example keys look like this), so any
block of leaves can be regenerated for a stored-tree proof. Reports seconds for the builds, the stored file's
size, the build's peak RSS above the process's RSS before it (VmHWM) and proof latencies; the root hex so runs can be
compared. ``in_memory=False`` (the 10M-leaf run of ``make bench-scale``) skips the in-memory tree.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from ratchet_stats import merkle
from ratchet_stats.merkle_store import StoredTree, TreeBuilder, leaf_hashes

N_LEAVES = 1_000_000
OLD_SIZE = 750_000
SEED = 20250101
CHUNK = 65_536


def _leaves(lo: int, hi: int) -> list[bytes]:
    return [hashlib.sha256(b"%d:%d" % (SEED, i)).digest() for i in range(lo, hi)]


def _reset_hwm() -> None:
    """Reset the peak-RSS mark (Linux: ``echo 5 > /proc/self/clear_refs``)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def _ms(seconds: list[float]) -> dict[str, float]:
    s = sorted(seconds)
    return {"median_ms": round(1000 * s[len(s) // 2], 3), "max_ms": round(1000 * s[-1], 3)}


def run(out_dir: Path, n: int = N_LEAVES, old_size: int = OLD_SIZE, in_memory: bool = True) -> dict[str, Any]:
    rng = random.Random(SEED)
    indices = sorted({0, 1, n // 3, old_size - 1, n - 1, *(rng.randrange(n) for _ in range(500))})
    result: dict[str, Any] = {"n_leaves": n}

    with tempfile.TemporaryDirectory(prefix="bench-merkle-") as tmp:
        path = Path(tmp) / "tree.bin"
        rss_before = _rss_mb("VmRSS")
        _reset_hwm()
        stored_build_s = 0.0  # leaf hashing and tree building; generating the leaves is not counted
        builder = TreeBuilder(path)
        for lo in range(0, n, CHUNK):
            chunk = _leaves(lo, min(n, lo + CHUNK))
            started = time.perf_counter()
            builder.add_leaves(chunk)
            stored_build_s += time.perf_counter() - started
        started = time.perf_counter()
        root = builder.finish()
        stored_build_s += time.perf_counter() - started
        peak_delta = _rss_mb("VmHWM") - rss_before

        prove, verify, proofs = [], [], {}
        with StoredTree(path) as tree:
            for i in indices:
                lo, hi = tree.block_range(i)
                block = leaf_hashes(_leaves(lo, hi))  # the caller holds the block's leaves (a row group)
                t0 = time.perf_counter()
                proof = tree.inclusion_proof(i, block)
                t1 = time.perf_counter()
                ok = merkle.verify_inclusion(_leaves(i, i + 1)[0], i, n, proof, root)
                verify.append(time.perf_counter() - t1)
                prove.append(t1 - t0)
                proofs[i] = proof
                assert ok, f"stored proof of {i} does not verify"
            lo, hi = tree.block_range(old_size - 1)
            t0 = time.perf_counter()
            consistency = tree.consistency_proof(old_size, leaf_hashes(_leaves(lo, hi)))
            old_root = tree.root(old_size, leaf_hashes(_leaves(lo, hi)))
            stored_consistency_s = time.perf_counter() - t0
        consistent = merkle.verify_consistency(old_size, n, old_root, root, consistency)
        result["stored"] = {
            "build_s": round(stored_build_s, 3),
            "file_bytes": path.stat().st_size,
            "build_peak_rss_above_start_mb": round(peak_delta, 1),
            "inclusion_prove": _ms(prove),
            "inclusion_verify": _ms(verify),
            "proofs": len(prove),
            "consistency_prove_ms": round(1000 * stored_consistency_s, 3),
            "consistency_verified": consistent,
        }

    same = None
    if in_memory:
        leaves = _leaves(0, n)
        started = time.perf_counter()
        tree_m = merkle.MerkleTree(leaves)
        build_s = time.perf_counter() - started
        assert tree_m.root() == root
        t_prove = []
        for i in indices[:50]:
            t0 = time.perf_counter()
            tree_m.inclusion_proof(i)
            t_prove.append(time.perf_counter() - t0)
        same = all(tree_m.inclusion_proof(i) == proofs[i] for i in indices) and (
            tree_m.consistency_proof(old_size) == consistency
        )
        result["in_memory"] = {"build_s": round(build_s, 3), "inclusion_prove": _ms(t_prove)}
        del leaves, tree_m

    result.update(
        {
            "root": root.hex(),
            "consistency": {"old_size": old_size, "old_root": old_root.hex(), "proof_len": len(consistency)},
            "summary": {
                "n_leaves": n,
                "stored_build_s": result["stored"]["build_s"],
                "stored_file_mb": round(result["stored"]["file_bytes"] / 1e6, 2),
                "stored_build_peak_rss_above_start_mb": result["stored"]["build_peak_rss_above_start_mb"],
                "stored_inclusion_prove_ms_median": result["stored"]["inclusion_prove"]["median_ms"],
                "stored_inclusion_prove_ms_max": result["stored"]["inclusion_prove"]["max_ms"],
                "in_memory_build_s": result.get("in_memory", {}).get("build_s"),
                "stored_equals_in_memory": same,
                "all_verified": consistent,
                "root": root.hex()[:16],
            },
        }
    )
    return result
