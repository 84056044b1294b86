"""The artifacts in an object store (``RATCHET_ARTIFACTS_URL=s3://bucket/artifacts``), the local folder a cache.

Without the setting nothing here runs: the artifacts are the local folder (``ratchet_core.layout``), as always.
With it, the store is the source of truth and ``RATCHET_ARTIFACTS`` (default ``$RATCHET_HOME/artifacts``) is a
working cache with the same relative names, so a night step on a machine with an empty cache (a Kubernetes pod)
works:

- :meth:`ArtifactStore.sync_down`: before a step, every object the cache lacks is downloaded (atomic rename into
  place); a cached copy of a *mutable* file (the golden registry, a day's training set ...) that is still what this
  cache last synced is refreshed when the store's copy changed since.
- :meth:`ArtifactStore.sync_up`: after a step, every cache file that is new or changed since the last sync is
  published, and a file this cache had synced and has deleted since (retention, ``ratchet admin erase``) is
  deleted from the store. Files under :data:`WRITE_ONCE` (adapters, certificates, BOMs, receipts: signed or digest-pinned) are
  **write-once**: a first publish is a conditional PUT (``ratchet_core.lake.write_once``), a second publish with the
  same bytes is a no-op and one with different bytes raises :class:`ArtifactConflict`. Other files are replaced.
- :meth:`ArtifactStore.fetch`: one file or folder on demand (readers: the gateway's receipt/proof routes, ``ratchet
  admin export-adapter``, ``ratchet verify`` of an URL, the adapter reconciler): ``ArtifactLayout(root, store=...)``
  fetches an item the cache lacks in its one ``path()`` join.
- :func:`fetch_adapter`: an adapter folder at any fsspec URL into a local adapter cache, digest-checked, renamed
  into place whole (the student server's ``/v1/load_lora_adapter`` with an ``s3://`` path).

Names whose any component begins with ``.`` (staging folders, temp files, locks, shards) never travel. The cache
keeps ``.artifact-store.json`` (relative name -> size, mtime, store ETag at the last sync) so a sync only moves what
changed. The Dagster resource ``paths`` (``ratchet_assets.defs.resources.RatchetPaths``) calls ``sync_down`` when a
step starts and ``sync_up`` when it ends: that is the one hook of the night.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from ratchet_core.lake import atomic_write_bytes, is_url, write_once

STATE_FILE = ".artifact-store.json"
# Prefixes of write-once names: signed files and digest-pinned adapters (a changed byte is a different artifact).
WRITE_ONCE = ("adapters/v", "certificates/", "boms/", "receipts/")
MISS_TTL_S = 30.0  # how long an on-demand fetch that found nothing is not asked again


class ArtifactConflict(RuntimeError):
    """A write-once artifact is already in the store with other bytes."""


def write_once_name(rel: str) -> bool:
    return rel.startswith(WRITE_ONCE) or rel.endswith(".dsse.json")


def _travels(rel: str) -> bool:
    return bool(rel) and not any(part.startswith(".") for part in rel.split("/"))


def _etag(info: dict[str, Any]) -> str:
    """The store's content tag of an object (S3's ETag; size+mtime elsewhere)."""
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    if tag:
        return str(tag).strip('"')
    return f"{info.get('size')}:{info.get('mtime') or info.get('LastModified') or info.get('created') or ''}"


class ArtifactStore:
    """The artifacts at ``url`` (any fsspec URL) with ``cache`` (a local folder) as the working copy."""

    def __init__(self, url: str, cache: str | os.PathLike):
        from fsspec.core import url_to_fs

        self.url = str(url).rstrip("/")
        self.fs, root = url_to_fs(self.url)
        self.root = root.rstrip("/")
        self.cache = Path(cache)
        self._misses: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"ArtifactStore({self.url!r}, cache={str(self.cache)!r})"

    # names -----------------------------------------------------------------------------------------------
    def key(self, rel: str) -> str:
        return f"{self.root}/{rel.strip('/')}" if rel.strip("/") else self.root

    def uri(self, rel: str = "") -> str:
        """The full URL of a relative name (what an endpoint that downloads itself is given)."""
        return f"{self.url}/{rel.strip('/')}" if rel.strip("/") else self.url

    def _rel(self, key: str) -> str:
        return key[len(self.root) :].lstrip("/")

    def _listing(self, rel: str = "") -> dict[str, dict[str, Any]]:
        """relative name -> info of every object under ``rel`` (one recursive listing, cache invalidated)."""
        key = self.key(rel)
        self.fs.invalidate_cache(key)
        try:
            found = self.fs.find(key, detail=True)
        except FileNotFoundError:
            return {}
        out = {}
        for k, info in found.items():
            if info.get("type", "file") != "file":
                continue
            r = self._rel(k)
            if _travels(r):
                out[r] = info
        return out

    # the cache's record of the last sync -------------------------------------------------------------------
    def _state(self) -> dict[str, list]:
        try:
            return json.loads((self.cache / STATE_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict[str, list]) -> None:
        atomic_write_bytes(self.cache / STATE_FILE, json.dumps(state, sort_keys=True).encode())

    @staticmethod
    def _stat(path: Path) -> list:
        st = path.stat()
        return [st.st_size, st.st_mtime_ns]

    # down ------------------------------------------------------------------------------------------------
    def _download(self, rel: str, info: dict[str, Any], state: dict[str, list]) -> None:
        path = self.cache / rel
        atomic_write_bytes(path, self.fs.cat_file(self.key(rel)))
        state[rel] = [*self._stat(path), _etag(info)]

    def sync_down(self, prefix: str = "") -> list[str]:
        """Download what the cache lacks (or holds unchanged but stale) under ``prefix``; the names fetched."""
        state, fetched = self._state(), []
        for rel, info in sorted(self._listing(prefix).items()):
            path = self.cache / rel
            if path.exists():
                known = state.get(rel)
                if not known or known[:2] != self._stat(path) or known[2] == _etag(info):
                    continue  # changed here (sync_up publishes it), never synced, or current
                if write_once_name(rel):
                    continue
            self._download(rel, info, state)
            fetched.append(rel)
        if fetched:
            self._save(state)
        return fetched

    def fetch(self, rel: str) -> bool:
        """Make the file or folder ``rel`` present in the cache; False when the store has nothing there."""
        rel = rel.strip("/")
        if not _travels(rel):
            return False
        now = time.monotonic()
        if now - self._misses.get(rel, -MISS_TTL_S) < MISS_TTL_S:
            return False
        state, found = self._state(), False
        try:
            if self.fs.isfile(self.key(rel)):
                self._download(rel, self.fs.info(self.key(rel)), state)
                found = True
            else:
                for r, info in sorted(self._listing(rel).items()):
                    if not (self.cache / r).exists():
                        self._download(r, info, state)
                    found = True
        except FileNotFoundError:
            found = False
        if found:
            self._save(state)
            self._misses.pop(rel, None)
        else:
            self._misses[rel] = now
        return found

    # up --------------------------------------------------------------------------------------------------
    def sync_up(self, prefix: str = "") -> list[str]:
        """Publish cache files under ``prefix`` that are new or changed since the last sync, and delete from the
        store what this cache had synced and has deleted since (retention); the names (``-name`` for a deletion).

        Raises :class:`ArtifactConflict` for a write-once name the store holds with other bytes."""
        base = self.cache / prefix if prefix else self.cache
        if not base.exists():
            return []
        state, published = self._state(), []
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        try:
            for rel in sorted(r for r in state if r.startswith(prefix) and not (self.cache / r).exists()):
                # synced by this cache once, deleted here since (retention): deleted in the store too
                if self.fs.exists(self.key(rel)):
                    self.fs.rm_file(self.key(rel))
                del state[rel]
                published.append(f"-{rel}")
            for path in files:
                rel = path.relative_to(self.cache).as_posix()
                if not _travels(rel):
                    continue
                stat = self._stat(path)
                if state.get(rel, [None, None])[:2] == stat:
                    continue
                if self._publish(rel, path.read_bytes(), state):
                    published.append(rel)
                state[rel][:2] = stat
        finally:
            self._save(state)
        return published

    def _publish(self, rel: str, data: bytes, state: dict[str, list]) -> bool:
        key = self.key(rel)
        once = write_once_name(rel)
        try:
            if once:
                write_once(self.fs, key, data)
            else:
                self.fs.pipe_file(key, data)
        except FileExistsError:
            if self.fs.cat_file(key) != data:
                raise ArtifactConflict(
                    f"{self.uri(rel)} is already in the artifacts store with other bytes: it is written once "
                    f"(signed or digest-pinned); the local {rel} differs (sha256 "
                    f"{hashlib.sha256(data).hexdigest()[:12]}). Was it rebuilt with another key or input?"
                ) from None
            state[rel] = [0, 0, _etag(self.fs.info(key))]
            return False
        self.fs.invalidate_cache(key)
        state[rel] = [0, 0, _etag(self.fs.info(key))]
        return True


def from_settings(settings: Any, cache: str | os.PathLike | None = None) -> ArtifactStore | None:
    """The store ``RATCHET_ARTIFACTS_URL`` names (cache: the artifacts root), or None when it is unset."""
    url = getattr(settings, "artifacts_url", None)
    if not url:
        return None
    return ArtifactStore(url, cache if cache is not None else settings.artifacts_root)


def store_for(url: str, cache: str | os.PathLike) -> ArtifactStore | None:
    return ArtifactStore(url, cache) if url else None


# Adapters into a local cache (student servers) ---------------------------------------------------------------
def fetch_adapter(url: str, cache: str | os.PathLike, digest: str = "") -> Path:
    """The adapter folder at ``url`` as a local folder under ``cache`` (downloaded once per content).

    Files go to a hidden temp folder first; the adapter digest (``ratchet_stats.certificate.adapter_digest``) is
    computed there and, when ``digest`` is given, must equal it (ValueError otherwise, nothing kept); the folder
    is then renamed to ``<cache>/<digest[:16]>-<name>`` in one step, so a loader never sees half an adapter and
    two loads of the same content share one copy. A plain path is returned as it is.
    """
    if not is_url(url):
        return Path(url)
    from fsspec.core import url_to_fs

    from ratchet_stats.certificate import adapter_dir_digest  # scipy: only where an adapter is fetched

    fs, root = url_to_fs(url.rstrip("/"))
    root = root.rstrip("/")
    fs.invalidate_cache(root)
    files = {
        k[len(root) :].lstrip("/"): k for k, i in fs.find(root, detail=True).items() if i["type"] == "file"
    }
    if "adapter_config.json" not in files:
        raise FileNotFoundError(f"no adapter at {url} (no adapter_config.json there)")
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    name = root.rsplit("/", 1)[-1] or "adapter"
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
    try:
        for rel, key in sorted(files.items()):
            if not _travels(rel):
                continue
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_bytes(fs.cat_file(key))
        got = adapter_dir_digest(tmp)
        if digest and got != digest:
            raise ValueError(f"adapter at {url} has digest {got[:16]}..., expected {digest[:16]}...")
        final = cache / f"{got.removeprefix('sha256:')[:16]}-{name}"
        if final.exists():
            return final
        os.rename(tmp, final)
        return final
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# Signed files named by URL (``ratchet verify s3://.../receipt.dsse.json``) ---------------------------------------
def local_copy(url: str, cache: str | os.PathLike | None = None) -> Path:
    """A local copy of the object ``url`` together with the files beside it (a receipt's rows and client lines, a
    BOM's certificate and key lists), so a verifier that looks beside a file finds them; a plain path unchanged."""
    if not is_url(url):
        return Path(url)
    from fsspec.core import url_to_fs

    fs, key = url_to_fs(url)
    folder_key, _, name = key.rstrip("/").rpartition("/")
    base = Path(cache) if cache else Path(tempfile.gettempdir()) / "ratchet-artifact-copies"
    folder = base / hashlib.sha256(fs.unstrip_protocol(folder_key).encode()).hexdigest()[:16]
    fs.invalidate_cache(folder_key)
    for info in fs.ls(folder_key, detail=True):
        if info.get("type") == "file":
            child = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if _travels(child):
                atomic_write_bytes(folder / child, fs.cat_file(info["name"]))
    if not (folder / name).is_file():
        raise FileNotFoundError(f"{url} is not in the store")
    return folder / name


def localize_args(args: list[str] | tuple[str, ...]) -> list[str]:
    """Command-line arguments with every object-store URL (``s3://...``) replaced by :func:`local_copy`'s path."""
    out = []
    for a in args:
        if is_url(a) and not a.startswith(("http://", "https://")):
            prefix, eq, value = a.partition("=") if a.startswith("--") and "=" in a else ("", "", a)
            out.append(f"{prefix}{eq}{local_copy(value)}")
        else:
            out.append(a)
    return out


# The night's one hook ------------------------------------------------------------------------------------------
def publishes_artifacts(fn: Any) -> Any:
    """Decorate a night asset or op that takes the ``paths`` resource: when it returns (or raises), what it wrote
    to the artifacts cache is published to ``RATCHET_ARTIFACTS_URL`` (a no-op without it). The matching fetch is
    the resource's ``setup_for_execution`` (a Dagster resource with a teardown would become a context manager
    that every ``build_sensor_context`` caller must enter, hence a decorator for the publish half)."""
    import functools
    import inspect

    def _publish(kwargs: dict[str, Any]) -> None:
        paths = kwargs.get("paths")
        store = paths.artifact_store() if paths is not None else None
        if store is not None:
            store.sync_up()

    if inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                yield from fn(*args, **kwargs)
            finally:
                _publish(kwargs)

        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        finally:
            _publish(kwargs)

    return wrapper
