"""Read the traffic lake wherever it lives: a local folder or any fsspec URL, through one code path.

The gateway's sealer (``ratchet_gateway.ledger``) publishes immutable segments
``<lake>/traffic/day=D/<replica>-<first seq>.parquet`` to a folder (``$RATCHET_HOME/lake``) or to any fsspec URL
(``RATCHET_LAKE=s3://bucket/lake``, ``gs://``, ``memory://`` ...). Every reader (the night's ``traffic`` step,
the segments sensor, release evidence) goes through :class:`Lake`:

- ``Lake(location)``: the fsspec filesystem and the lake's root inside it (``fsspec.core.url_to_fs``; a plain path
  is the local filesystem). Credentials and options come from the filesystem's usual environment (e.g. AWS_*).
- ``days()`` / ``segments(day)``: listings with sizes and modification times (one ``ls`` per folder; the
  filesystem's listing cache is invalidated first, so a long-lived sensor sees segments sealed since its last
  tick — s3fs/gcsfs cache listings per process otherwise).
- ``read_schema(rel)`` / ``read_table(rel)``: Parquet through pyarrow (``filesystem=`` the fsspec filesystem;
  pyarrow maps the local one onto its native local filesystem, so local reads are what they always were).
- ``attach(con)`` + ``duckdb_path(rel)``: DuckDB reads the segments in place. Local: the plain file path (no
  Python in the scan). Elsewhere: the filesystem is registered with the connection
  (``DuckDBPyConnection.register_filesystem``; no DuckDB extension is downloaded) under the private protocol
  ``ratchetlake://``, rooted at the lake (``DirFileSystem``), so DuckDB never tries to autoload ``httpfs`` for
  ``s3://`` / ``gs://`` / ``az://`` paths.

Artifacts (golden split, adapters, certificates, BOMs) stay local folders: at scale that is a shared volume (a
PVC/NFS mounted by every Dagster run pod). Object-store artifacts are future work; only the lake is an URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

LAKE_PROTOCOL = "ratchetlake"


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
        return self.rel.split("/")[-2].removeprefix("day=")


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

    def days(self, kind: str = "traffic") -> list[str]:
        """Days with a ``<kind>/day=D`` folder, sorted (names that are not ``day=...`` are skipped)."""
        out = []
        for info in self._ls(kind):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") == "directory" and name.startswith("day="):
                out.append(name.removeprefix("day="))
        return sorted(out)

    def segments(self, day: str, kind: str = "traffic") -> list[Segment]:
        """Sealed ``*.parquet`` files of a day, by name (names beginning with '.' are not sealed yet)."""
        folder = f"{kind}/day={day}"
        out = []
        for info in self._ls(folder):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info.get("type") != "file" or not name.endswith(".parquet") or name.startswith("."):
                continue
            out.append(Segment(f"{folder}/{name}", name, int(info.get("size") or 0), _mtime(self.fs, info)))
        return sorted(out, key=lambda s: s.name)

    def read_schema(self, rel: str) -> Any:
        import pyarrow.parquet as pq

        return pq.read_schema(self.path(rel), filesystem=self.fs)

    def read_table(self, rel: str, columns: list[str] | None = None) -> Any:
        import pyarrow.parquet as pq

        return pq.read_table(self.path(rel), columns=columns, filesystem=self.fs)

    def attach(self, con: Any) -> None:
        """Let DuckDB connection ``con`` read ``duckdb_path(...)`` (a no-op for a local lake)."""
        if not self.local:
            con.register_filesystem(_lake_dirfs(self.fs, self.root))

    def duckdb_path(self, rel: str) -> str:
        """The path DuckDB reads ``rel`` at (after ``attach``)."""
        if self.local:
            return str(Path(self.root) / rel)
        return f"{LAKE_PROTOCOL}://{rel.strip('/')}"


@cache
def _lake_dirfs_class() -> type:
    from fsspec.implementations.dirfs import DirFileSystem

    class LakeDirFileSystem(DirFileSystem):
        """The lake's filesystem rooted at the lake, under a protocol DuckDB has no built-in handler for."""

        protocol = LAKE_PROTOCOL

    return LakeDirFileSystem


def _lake_dirfs(fs: Any, root: str) -> Any:
    return _lake_dirfs_class()(path=root, fs=fs)
