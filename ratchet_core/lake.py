"""The lake, wherever it lives (a local folder or any fsspec URL): segment names, reading and atomic publishing.

This is the only module that names, lists, reads or writes lake files. The gateway's sealer
(``ratchet_gateway.ledger``) publishes immutable segments ``<lake>/traffic/day=D/<replica>-<first seq>.parquet``
(:func:`segment_relpath`, parsed back by :func:`parse_segment_relpath`) to a folder (``$RATCHET_HOME/lake``) or to any
fsspec URL (``RATCHET_LAKE=s3://bucket/lake``, ``gs://``, ``memory://`` ...); every reader (the night's ``traffic``
step, the segments sensor, release evidence) goes through :class:`Lake` too:

- ``Lake(location)``: the fsspec filesystem and the lake's root inside it (``fsspec.core.url_to_fs``; a plain path
  is the local filesystem). Credentials and options come from the filesystem's usual environment (e.g. AWS_*).
- ``days()`` / ``segments(day)``: listings with sizes and modification times (one ``ls`` per folder; the
  filesystem's listing cache is invalidated first, so a long-lived sensor sees segments sealed since its last
  tick — s3fs/gcsfs cache listings per process otherwise). ``replica_segments(replica)``: one replica's segments.
- ``read_schema(rel)`` / ``read_table(rel)``: Parquet through pyarrow (``filesystem=`` the fsspec filesystem;
  pyarrow maps the local one onto its native local filesystem, so local reads are what they always were).
- ``attach(con)`` + ``duckdb_path(rel)``: DuckDB reads the segments in place. Local: the plain file path (no
  Python in the scan). Elsewhere: the filesystem is registered with the connection
  (``DuckDBPyConnection.register_filesystem``; no DuckDB extension is downloaded) under the private protocol
  ``ratchetlake://``, rooted at the lake (``DirFileSystem``), so DuckDB never tries to autoload ``httpfs`` for
  ``s3://`` / ``gs://`` / ``az://`` paths.
- ``publish_table(rel, table)`` / ``publish_bytes(rel, data)``: readers only ever see complete files.

  - local folder (a plain path or ``file://``): temp name ``.<name>.tmp-<pid>`` in the same folder, fsync, atomic
    ``rename`` to the final name, fsync of the folder (:func:`atomic_write_bytes`);
  - any other fsspec filesystem: **write-once object keys**. Object stores have no atomic rename (fsspec's ``mv``
    is copy + delete there), so the whole file is built in memory and written to its final key with one
    ``pipe_file`` (one PUT, or a multipart upload that becomes visible only when completed): readers see the
    object complete or not at all. A crash before the upload completes leaves no object. On S3 the PUT is
    conditional (``If-None-Match: *``, :func:`write_once`): an existing key is never overwritten.

The night's artifacts (``ratchet_core.layout``) are written with the same :func:`atomic_write_bytes`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

LAKE_PROTOCOL = "ratchetlake"
TRAFFIC = "traffic"  # the lake's one kind of folder: sealed ledger segments


# Segment names -------------------------------------------------------------------------------------------------
def day_folder(day: str, kind: str = TRAFFIC) -> str:
    """Lake-relative folder of a day: ``<kind>/day=YYYY-MM-DD``."""
    return f"{kind}/day={day}"


def segment_name(replica: str, first_seq: int) -> str:
    """File name of a sealed segment: ``<replica>-<first seq:08d>.parquet`` (names sort in seq order)."""
    return f"{replica}-{first_seq:08d}.parquet"


def segment_relpath(day: str, replica: str, first_seq: int) -> str:
    """Lake-relative path of a sealed segment: ``traffic/day=YYYY-MM-DD/<replica>-<first seq:08d>.parquet``."""
    return f"{day_folder(day)}/{segment_name(replica, first_seq)}"


# Parquet footer entry of a sealed segment: when its writer sealed it, ISO 8601 on the writer's own clock
# (``ratchet_core.clock``), so lateness is judged on the clock the data was written with.
SEALED_AT = b"ratchet.sealed_at"
# Parquet footer entry of a sealed segment: the id of the ledger that sealed it (a replica knows its own segments).
LEDGER_ID = b"ratchet.ledger"


@dataclass(frozen=True)
class SegmentName:
    """The parts of a segment's path (:func:`parse_segment_relpath`)."""

    day: str
    replica: str
    first_seq: int


def parse_segment_relpath(rel: str) -> SegmentName:
    """``traffic/day=D/<replica>-<first seq>.parquet`` (or any path ending so) -> its parts; ValueError otherwise.

    The replica may itself hold '-' (``host-0``): the first seq is what follows the last '-'.
    """
    parts = str(rel).replace("\\", "/").rstrip("/").split("/")
    if len(parts) < 2 or not parts[-2].startswith("day=") or not parts[-1].endswith(".parquet"):
        raise ValueError(f"not a segment path (traffic/day=YYYY-MM-DD/<replica>-<seq>.parquet): {rel}")
    replica, sep, seq = parts[-1].removesuffix(".parquet").rpartition("-")
    if not sep or not replica or not seq.isdigit():
        raise ValueError(f"not a segment name (<replica>-<seq>.parquet): {parts[-1]}")
    return SegmentName(parts[-2].removeprefix("day="), replica, int(seq))


def day_of(rel: str) -> str:
    """The day of a lake-relative path under ``<kind>/day=D/`` (segments and day folders alike)."""
    for part in reversed(str(rel).split("/")):
        if part.startswith("day="):
            return part.removeprefix("day=")
    raise ValueError(f"no day=YYYY-MM-DD folder in {rel}")


def is_url(location: str | os.PathLike) -> bool:
    """True for ``proto://...`` (fsspec URLs, ``file://`` included), False for a plain path."""
    return "://" in str(location)


def lake_location(location: str | os.PathLike) -> str | Path:
    """A plain path as ``Path``, an URL untouched (``Path("s3://b/l")`` would collapse ``//`` into ``/``)."""
    return str(location) if is_url(location) else Path(location)


@dataclass(frozen=True)
class Segment:
    """One sealed file of the lake."""

    rel: str  # lake-relative, "/"-separated: traffic/day=YYYY-MM-DD/<name>.parquet
    name: str
    size: int  # bytes
    mtime: datetime  # when it was sealed (UTC): the file's modification time

    @property
    def day(self) -> str:
        return day_of(self.rel)


def _mtime(fs: Any, info: dict[str, Any]) -> datetime:
    """Modification time from a listing entry (keys differ per filesystem); one extra call when absent."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    modified = fs.modified(info["name"])
    return modified if modified.tzinfo else modified.replace(tzinfo=UTC)


class Lake:
    """The lake at a folder or fsspec URL (module docstring)."""

    def __init__(self, location: str | os.PathLike):
        from fsspec.core import url_to_fs
        from fsspec.implementations.local import LocalFileSystem

        self.location = str(location)
        self.fs, root = url_to_fs(self.location)
        self.root = root.rstrip("/") or "/"
        self.local = isinstance(self.fs, LocalFileSystem)

    def path(self, rel: str = "") -> str:
        """The filesystem path of a lake-relative path."""
        rel = rel.strip("/")
        if not rel:
            return self.root
        return f"{self.root}/{rel}" if self.root != "/" else f"/{rel}"

    def uri(self, rel: str = "") -> str:
        """Where ``rel`` is, for people (messages, metadata): a local path, or the full URL."""
        if self.local:
            return str(Path(self.root) / rel) if rel else self.root
        return self.fs.unstrip_protocol(self.path(rel))

    def _ls(self, rel: str) -> list[dict[str, Any]]:
        path = self.path(rel)
        self.fs.invalidate_cache(path)
        try:
            return self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def days(self, kind: str = TRAFFIC) -> list[str]:
        """Days with a ``<kind>/day=D`` folder, sorted (names that are not ``day=...`` are skipped)."""
        out = []
        for info in self._ls(kind):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") == "directory" and name.startswith("day="):
                out.append(name.removeprefix("day="))
        return sorted(out)

    def segments(self, day: str, kind: str = TRAFFIC) -> list[Segment]:
        """Sealed ``*.parquet`` files of a day, by name (names beginning with '.' are not sealed yet)."""
        folder = day_folder(day, kind)
        out = []
        for info in self._ls(folder):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") != "file" or not name.endswith(".parquet") or name.startswith("."):
                continue
            out.append(Segment(f"{folder}/{name}", name, int(info.get("size") or 0), _mtime(self.fs, info)))
        return sorted(out, key=lambda s: s.name)

    def unreadable_entries(self, day: str, kind: str = TRAFFIC) -> list[str]:
        """Lake-relative paths of a day's ``*.parquet`` entries that are not regular files (a symlink, a folder,
        a device): :meth:`segments` leaves them out, so a reader that must see every row (an erasure) refuses
        them instead."""
        folder = day_folder(day, kind)
        out = []
        for info in self._ls(folder):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if name.endswith(".parquet") and not name.startswith(".") and info.get("type") != "file":
                out.append(f"{folder}/{name}")
        return sorted(out)

    def replica_segments(self, replica: str) -> list[str]:
        """Lake-relative paths of every sealed segment of ``replica``, any day (the sealer's crash recovery)."""
        self.fs.invalidate_cache(self.path(TRAFFIC))
        out = []
        for path in self.fs.glob(self.path(f"{TRAFFIC}/day=*/{replica}-*.parquet")):
            rel = path[len(self.root) :].lstrip("/") if self.root != "/" else path.lstrip("/")
            name = rel.rsplit("/", 1)[-1]
            if name.startswith("."):
                continue
            try:
                parsed = parse_segment_relpath(rel)
            except ValueError:
                continue
            if parsed.replica == replica:  # "t-1-*" also matches replica "t-1-0"'s files
                out.append(rel)
        return sorted(out)

    def exists(self, rel: str) -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def open(self, rel: str, mode: str = "rb") -> Any:
        return self.fs.open(self.path(rel), mode)

    def publish_bytes(self, rel: str, data: bytes) -> None:
        """Publish a complete file at ``rel`` (module docstring: rename locally, one write-once PUT elsewhere)."""
        if self.local:
            atomic_write_bytes(Path(self.path(rel)), data, durable=True)
        else:
            write_once(self.fs, self.path(rel), data)

    def publish_table(self, rel: str, table: Any, once: bool = False) -> None:
        """Publish an Arrow table as a Parquet file at ``rel`` (pyarrow's defaults, as sealed segments always were).
        `once`: never replace a file already there (FileExistsError), in a folder as on an object store (a new
        segment; an erasure rewrites one in place)."""
        import pyarrow.parquet as pq

        if self.local:
            path = Path(self.path(rel))
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = _tmp_name(path)
            pq.write_table(table, tmp)
            if once:
                _commit_once(tmp, path)
            else:
                _commit(tmp, path, durable=True)
        else:
            import pyarrow as pa

            sink = pa.BufferOutputStream()
            pq.write_table(table, sink)
            write_once(self.fs, self.path(rel), sink.getvalue().to_pybytes())

    def ledger_of(self, rel: str) -> str | None:
        """The id of the ledger that sealed segment ``rel`` (None: sealed before segments carried it)."""
        meta = self.read_schema(rel).metadata or {}
        value = meta.get(LEDGER_ID)
        return value.decode() if value else None

    def read_schema(self, rel: str) -> Any:
        import pyarrow.parquet as pq

        return pq.read_schema(self.path(rel), filesystem=self.fs)

    def sealed_at(self, seg: Segment) -> datetime:
        """When `seg` was sealed on the clock its writer used: the footer entry :data:`SEALED_AT` the gateway's
        sealer writes (Ratchet's clock, the accelerated one in a demo); the file's mtime when it has none."""
        try:
            return datetime.fromisoformat((self.read_schema(seg.rel).metadata or {})[SEALED_AT].decode())
        except (KeyError, ValueError, OSError):
            return seg.mtime

    def read_table(self, rel: str, columns: list[str] | None = None) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(self.path(rel), columns=columns, filesystem=self.fs)

    def day_tables(self, day: str, columns: list[str]) -> list[Any]:
        """Each sealed segment of ``day`` as a table of exactly ``columns``, in that order: a column an older
        segment lacks is all nulls (readers of old and new segments alike, e.g. the cost report and replay)."""
        import pyarrow as pa

        tables = []
        for seg in self.segments(day):
            names = set(self.read_schema(seg.rel).names)
            t = self.read_table(seg.rel, columns=[c for c in columns if c in names])
            for c in columns:
                if c not in t.column_names:
                    t = t.append_column(c, pa.nulls(t.num_rows))
            tables.append(t.select(columns))
        return tables

    def attach(self, con: Any) -> None:
        """Let DuckDB connection ``con`` read ``duckdb_path(...)`` (a no-op for a local lake)."""
        if not self.local:
            con.register_filesystem(_lake_dirfs(self.fs, self.root))

    def duckdb_path(self, rel: str) -> str:
        """The path DuckDB reads ``rel`` at (after ``attach``)."""
        if self.local:
            return str(Path(self.root) / rel)
        return f"{LAKE_PROTOCOL}://{rel.strip('/')}"


# Write-once object keys ------------------------------------------------------------------------------------------
def write_once(fs: Any, path: str, data: bytes) -> None:
    """Create the object ``path`` with ``data`` in one PUT, only if no object is there yet; FileExistsError if one is.

    S3 (s3fs): a conditional PUT (``If-None-Match: *``), so two writers of one key (say, two gateways given the same
    replica id) can never overwrite each other: the second gets HTTP 412, raised as FileExistsError. Filesystems
    without conditional writes get an existence check first (not atomic: a race between two writers of one key
    is then only caught on S3-compatible stores).
    """
    protocols = fs.protocol if isinstance(fs.protocol, tuple | list) else (fs.protocol,)
    if "s3" in protocols:
        try:
            fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise FileExistsError(
                f"{fs.unstrip_protocol(path)} already exists: lake objects are written once; is another writer "
                "using the same name (two gateways with one replica id)?"
            ) from None
        return
    if fs.exists(path):
        raise FileExistsError(f"{fs.unstrip_protocol(path)} already exists: lake objects are written once")
    fs.pipe_file(path, data)


# Atomic local files ----------------------------------------------------------------------------------------------
def _tmp_name(path: Path) -> Path:
    """A temp name beside ``path``: same folder (so the rename is atomic), hidden (listings skip it), per process."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _commit(tmp: Path, path: Path, durable: bool) -> None:
    if durable:
        _fsync(tmp)
    os.replace(tmp, path)
    if durable:
        _fsync(path.parent)


def _commit_once(tmp: Path, path: Path) -> None:
    """Move `tmp` to `path` only if nothing is there (a hard link fails on an existing name; rename would
    replace it), durably; FileExistsError otherwise."""
    _fsync(tmp)
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise FileExistsError(f"{path} already exists: lake segments are written once") from None
    finally:
        tmp.unlink(missing_ok=True)
    _fsync(path.parent)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, durable: bool = False) -> None:
    """Write ``data`` to a temp name beside ``path``, then rename it into place: readers never see half a file.

    ``durable``: fsync the file before and its folder after the rename (sealed segments: a crash must not lose a
    file the ledger has marked sealed). Artifacts are rebuilt by a rerun, so they skip the two flushes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_name(path)
    tmp.write_bytes(data)
    _commit(tmp, path, durable)


@cache
def _lake_dirfs_class() -> type:
    from fsspec.implementations.dirfs import DirFileSystem

    class LakeDirFileSystem(DirFileSystem):
        """The lake's filesystem rooted at the lake, under a protocol DuckDB has no built-in handler for."""

        protocol = LAKE_PROTOCOL

    return LakeDirFileSystem


def _lake_dirfs(fs: Any, root: str) -> Any:
    return _lake_dirfs_class()(path=root, fs=fs)
