"""The journal: a replica's append-only file of rows acknowledged but maybe not yet in DuckDB.

Each row is one record ``<len:u32><crc32:u32><orjson>`` (little-endian). A torn or corrupt record (a crash
mid-write: never acknowledged) ends the readable journal; everything before it is intact. The file is written by
one group commit at a time (``ratchet_gateway.ledger.commit``) and emptied once every record in it is in DuckDB.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

HEADER = struct.Struct("<II")


def encode_records(payloads: list[bytes]) -> bytes:
    """The records of these rows' JSON, concatenated (one ``write``)."""
    if len(payloads) == 1:  # a batch of one (a quiet gateway): no join
        data = payloads[0]
        return HEADER.pack(len(data), zlib.crc32(data)) + data
    return b"".join([HEADER.pack(len(data), zlib.crc32(data)) + data for data in payloads])


def intact_records(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(offset, payload length, payload) of every intact record of a journal's bytes, in order; stops at the first
    torn or corrupt one."""
    pos = 0
    while pos + HEADER.size <= len(data):
        length, crc = HEADER.unpack_from(data, pos)
        start = pos + HEADER.size
        end = start + length
        if end > len(data) or zlib.crc32(data[start:end]) != crc:
            return
        yield pos, length, data[start:end]
        pos = end


def read_journal(path: Path) -> list[dict[str, Any]]:
    """Every intact record of a journal file, in order; stops at the first torn or corrupt record."""
    if not path.exists():
        return []
    return [orjson.loads(payload) for _, _, payload in intact_records(path.read_bytes())]


class Journal:
    """A running ledger's journal file (``open`` empties it: the ledger has loaded what it held)."""

    def __init__(self, path: Path, max_bytes: int):
        self.path = path
        self.max_bytes = max_bytes
        self.fd = -1
        self._bytes = 0

    def open(self) -> None:
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.ftruncate(self.fd, 0)  # every row in it is now in DuckDB
        os.fsync(self.fd)
        self._bytes = 0

    def write(self, data: bytes, all_loaded: bool) -> None:
        """Append `data` (the caller fdatasyncs), first emptying the file when it is over ``max_bytes`` and
        `all_loaded` (every record in it is in DuckDB, none written and waiting for its sync)."""
        if self._bytes > self.max_bytes and all_loaded:
            os.ftruncate(self.fd, 0)
            self._bytes = 0
        os.write(self.fd, data)
        self._bytes += len(data)

    def sync(self) -> None:
        os.fdatasync(self.fd)

    def close(self, all_loaded: bool) -> None:
        """Close the file, emptied first when every record in it is in DuckDB."""
        if all_loaded:
            os.ftruncate(self.fd, 0)
        os.close(self.fd)
