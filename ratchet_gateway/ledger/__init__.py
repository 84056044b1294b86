"""The replica's durable request ledger: journal group commit -> DuckDB -> sealed Parquet segments.

Why this shape (measured on the 2-core box): a DuckDB commit costs 3-5 ms, an append + fdatasync of 2 KB about
0.3 ms. So a response is released once its row is in an append-only **journal** that has been fdatasync'd, and
rows reach DuckDB later, in batches:

1. ``await ledger.append(row)`` assigns the next per-replica ``seq`` (gap-free, journal order = seq order) and
   queues the row. A **group commit** takes every row queued while the previous fdatasync ran, writes them as
   journal records with one ``write`` + one ``fdatasync``, then resolves all their appends: one disk flush for
   many concurrent requests. In the gateway the event loop writes the batch itself and a small sync process does
   the fdatasync (``commit.LoopCommit``: no thread waiting for the GIL); a ledger opened without an event loop
   (tests, scripts) uses a writer thread (``commit.ThreadCommit``).
2. A **loader thread** inserts the journaled rows into ``<replica>.duckdb`` (the process's own file) every
   ``load_interval`` seconds, as an Arrow batch in one transaction (``arrow.rows_to_arrow``, from the journal's
   JSON).
3. Every ``segment_seconds`` and at shutdown the loader **seals** rows with ``seq`` > the sealed high-water mark
   into ``<lake>/traffic/day=D/<replica>-<first seq>.parquet``, then stores the new mark in DuckDB. If the
   process dies between publishing a segment and storing the mark, the next start reads the seqs of this
   replica's segments above the mark and never seals them again: no row sealed twice, none skipped.

The lake is a folder or any fsspec URL (``RATCHET_LAKE=s3://bucket/lake``, ``gs://``, ``memory://`` ...). Segment
names and publishing live in ``ratchet_core.lake`` (the module the night reads the lake with): a segment becomes
visible complete or not at all — a local folder gets a temp name, fsync and an atomic rename; an object store gets
one write-once ``pipe_file`` per key. A key is never rewritten (an existing key is skipped), and a crash before an
upload completes leaves no object, so the rows are sealed again under the same key at the next start.

Restart: rows of the journal with ``seq`` > max(seq) in DuckDB are loaded (idempotent by (replica, seq)); a torn
tail record (crash mid-write, never acknowledged) ends the replay. The journal is emptied once every row in it
is in DuckDB and it is larger than ``journal_max_bytes``.

Erasures (``ratchet erase``) are applied by the loader to the files this replica alone owns (``erasure``).

Replica identity must survive a crash so the restarted process replays the right journal: a process takes the
first free slot ``<base>-<i>`` by ``flock`` on ``<ledger dir>/<base>-<i>.lock`` (the kernel releases it when the
process dies), so ``--workers 2`` gives ``host-0`` and ``host-1`` and a restart takes them back. The base is
``RATCHET_REPLICA_ID`` (``ratchet gateway --replica``), default the host name. A ledger has an id of its own (made
once, in its DuckDB file) and stamps it on every segment it seals (``ratchet_core.lake.LEDGER_ID``): a new ledger
refuses a replica name that already has segments in the lake, an old one refuses it when the newest segment is
another ledger's (``ReplicaConflict``: two gateways on one host, or two hosts with one name, never interleave their
segments). Segments are written once: a name already taken is never replaced, and the rows it would have held
stay in the ledger (its seal mark does not move) until the conflict is resolved.

Modules: ``replica`` (:class:`Ledger`: slot, append API, loader, sealing), ``journal`` (the file and its records),
``commit`` (the two group-commit engines), ``erasure`` (scrubbing erased rows), ``arrow`` (rows as Arrow tables).
"""

from ratchet_gateway.ledger.arrow import rows_to_arrow
from ratchet_gateway.ledger.erasure import scrub_duckdb, scrub_journal
from ratchet_gateway.ledger.journal import read_journal
from ratchet_gateway.ledger.replica import Ledger, ReplicaConflict, default_replica_base

__all__ = [
    "Ledger",
    "ReplicaConflict",
    "default_replica_base",
    "read_journal",
    "rows_to_arrow",
    "scrub_duckdb",
    "scrub_journal",
]
