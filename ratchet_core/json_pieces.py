"""JSON for large request bodies, in pieces: parsed and serialised without holding the GIL for long.

The gateway's event loop shares one GIL with every worker thread, and a long C call that holds it (``orjson``,
pydantic, a NumPy pass over 4 MiB) stalls the loop even when it runs in a thread: measured here, ``orjson.loads``
held it ~100 ms on a 4 MiB flood of ``{}``, ``orjson.dumps`` ~50 ms on a 4 MiB string of escapes. So a large body
is handled in pieces of at most :data:`PIECE` bytes, with Python between them (where the interpreter hands the
GIL to the loop every ``sys.getswitchinterval()`` seconds):

- :func:`structure` finds the body's structural tokens (brackets, commas, colons outside strings) and their depth
  with NumPy, :data:`BLOCK` bytes at a time, carrying the open string, the backslash run and the depth from one
  block to the next (a quote counts only after an even run of backslashes, RFC 8259 §7);
- :func:`loads` parses a large container as batches of its elements of at most :data:`PIECE` bytes (each one
  ``orjson.loads``), recursing into an element larger than that; the value is exactly ``orjson.loads(raw)``'s,
  and malformed text raises ``orjson.JSONDecodeError`` as it would;
- :func:`dumps` serialises batches of elements, members and slices of a long string the same way; the bytes are
  exactly ``orjson.dumps(obj, option=...)``'s.

Each step is linear in the body. A string value is parsed in one call (its escapes cannot be split safely); 4 MiB
of ``\\"`` takes a few milliseconds.

The gateway's large-body lane (``ratchet_gateway.offload``) is its main user; it lives in ``ratchet_core`` because
the answer-contract guard (``ratchet_core.contract``) keys its validators with :func:`dumps` too.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
import regex

PIECE = 64 * 1024  # the most bytes one orjson call parses or writes for a large document
BLOCK = 256 * 1024  # the bytes one NumPy pass scans
_SLICE = 1 << 18  # the most tokens one NumPy pass over the token arrays looks at

_QUOTE, _BACKSLASH = 0x22, 0x5C
_OPEN = np.zeros(256, dtype=np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1
_TOKEN = np.zeros(256, dtype=bool)
_TOKEN[[ord(c) for c in "[]{},:"]] = True
_VALUE = np.zeros(256, dtype=bool)  # a token that adds a value: an opener, a comma
_VALUE[[ord(c) for c in "[{,"]] = True
_COMMA, _COLON = ord(","), ord(":")
_CLOSER = {ord("["): ord("]"), ord("{"): ord("}")}
_SPACE = regex.compile(rb"[ \t\r\n]*")


def _invalid(why: str) -> orjson.JSONDecodeError:
    return orjson.JSONDecodeError(f"invalid JSON: {why}", "", 0)


@dataclass(frozen=True)
class Structure:
    """The structural tokens of a JSON text, in order: byte offset, the byte, and the nesting depth after it."""

    pos: np.ndarray  # int64 offsets
    kind: np.ndarray  # uint8: one of [ ] { } , :
    depth: np.ndarray  # int32: depth after the token (an opener of a top-level container: 1)
    max_depth: int
    balanced: bool  # every bracket closed, depth never below 0
    values: int  # an upper bound of the values in the text: containers + commas + 1 (array elements, members)


def structure(raw: bytes) -> Structure:
    """The structural tokens of `raw` (module docstring), scanned :data:`BLOCK` bytes at a time."""
    data = np.frombuffer(raw, dtype=np.uint8)
    positions, kinds, depths = [], [], []
    run = 0  # backslashes just before the block
    inside = False  # the block starts inside a string
    depth = 0
    top = 0
    low = 0
    values = 1
    for start in range(0, len(data), BLOCK):
        b = data[start : start + BLOCK]
        quote = b == _QUOTE
        if quote.any() or inside:
            backslash = b == _BACKSLASH
            if backslash.any() or run:
                idx = np.arange(len(b), dtype=np.int64)
                last_other = np.maximum.accumulate(np.where(backslash, -1 - run, idx))
                before = np.empty(len(b), dtype=np.int64)
                before[0] = run
                before[1:] = idx[:-1] - last_other[:-1]
                quote &= (before & 1) == 0
                run = int(len(b) - 1 - last_other[-1])
            real = np.cumsum(quote, dtype=np.int64)
            outside = ((real + inside) & 1) == 0  # a closing quote counts as outside: it is no bracket
            inside = bool((int(real[-1]) + inside) & 1)
            token = _TOKEN[b] & outside
        else:
            token = _TOKEN[b]
            other = np.flatnonzero(b != _BACKSLASH)
            run = run + len(b) if not len(other) else len(b) - 1 - int(other[-1])
        where = np.flatnonzero(token)
        if len(where):
            k = b[where]
            d = depth + np.cumsum(_OPEN[k], dtype=np.int64)
            top = max(top, int(d.max()))
            low = min(low, int(d.min()))
            depth = int(d[-1])
            values += int(np.count_nonzero(_VALUE[k]))
            positions.append(where + start)
            kinds.append(k)
            depths.append(d.astype(np.int32))
    if not positions:
        empty = np.zeros(0, dtype=np.int64)
        return Structure(empty, empty.astype(np.uint8), empty.astype(np.int32), 0, not inside, 1)
    return Structure(
        np.concatenate(positions),
        np.concatenate(kinds),
        np.concatenate(depths),
        top,
        depth == 0 and low >= 0 and not inside,
        values,
    )


def max_depth(raw: bytes) -> int:
    """How deep `raw` nests arrays and objects (brackets inside strings are text)."""
    return structure(raw).max_depth


# Parsing ------------------------------------------------------------------------------------------------------
def loads(raw: bytes, piece: int = PIECE, scanned: Structure | None = None) -> Any:
    """``orjson.loads(raw)``, in pieces of at most `piece` bytes when `raw` is longer (module docstring);
    `scanned` is ``structure(raw)`` when the caller has it already."""
    if len(raw) <= piece:
        return orjson.loads(raw)
    s = scanned if scanned is not None else structure(raw)
    first = _skip_space(raw, 0, len(raw))
    if not len(s.pos) or s.pos[0] != first or raw[first] not in b"[{":  # a scalar (or not JSON): one call
        return orjson.loads(raw)
    if not s.balanced:
        raise _invalid("unbalanced brackets or an unterminated string")
    value, end = _Parser(raw, s, piece).container(0)
    if _skip_space(raw, end, len(raw)) != len(raw):
        raise _invalid("text after the document")
    return value


def _skip_space(raw: bytes, start: int, end: int) -> int:
    return _SPACE.match(raw, start, end, concurrent=True).end()


class _Parser:
    def __init__(self, raw: bytes, s: Structure, piece: int):
        self.raw, self.s, self.piece = raw, s, piece

    def container(self, t: int) -> tuple[Any, int]:
        """(the value of the container whose opener is token `t`, the offset after its closer)."""
        s, raw = self.s, self.raw
        opener = int(s.kind[t])
        depth = int(s.depth[t])
        close, commas, colons = self._inside(t, depth)
        if close < 0 or int(s.kind[close]) != _CLOSER[opener]:
            raise _invalid("a bracket closes the wrong container")
        lo, hi = int(s.pos[t]) + 1, int(s.pos[close])
        bounds = [lo, *(int(c) + 1 for c in commas)]
        ends = [*(int(c) for c in commas), hi]
        if len(bounds) == 1 and _skip_space(raw, lo, hi) == hi:  # [] or {}
            return ([] if opener == ord("[") else {}), hi + 1
        if opener == ord("["):
            return self._array(bounds, ends), hi + 1
        return self._object(bounds, ends, colons), hi + 1

    def _inside(self, t: int, depth: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(index of the closer of the container opened by token `t`, offsets of its own commas and colons)."""
        s = self.s
        commas, colons = [], []
        for a in range(t + 1, len(s.pos), _SLICE):
            d = s.depth[a : a + _SLICE]
            k = s.kind[a : a + _SLICE]
            out = np.flatnonzero(d < depth)
            stop = int(out[0]) if len(out) else len(d)
            own = d[:stop] == depth
            commas.append(s.pos[a : a + stop][own & (k[:stop] == _COMMA)])
            colons.append(s.pos[a : a + stop][own & (k[:stop] == _COLON)])
            if len(out):
                return a + stop, np.concatenate(commas), np.concatenate(colons)
        return -1, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def _batches(self, bounds: list[int], ends: list[int]) -> Iterator[tuple[int, int, bool]]:
        """(first, last, large) runs of consecutive items: small ones batched up to `piece` bytes, a large one
        alone."""
        i, n = 0, len(bounds)
        while i < n:
            if ends[i] - bounds[i] > self.piece:
                yield i, i, True
                i += 1
                continue
            j = i
            while j + 1 < n and ends[j + 1] - bounds[i] <= self.piece:
                j += 1
            if i == j and _skip_space(self.raw, bounds[i], ends[i]) == ends[i]:
                raise _invalid("an empty array element or object member")  # alone it would parse as [] or {}
            yield i, j, False
            i = j + 1

    def _array(self, bounds: list[int], ends: list[int]) -> list:
        out: list = []
        raw = self.raw
        for i, j, large in self._batches(bounds, ends):
            if large:
                out.append(self._value(bounds[i], ends[i]))
            else:
                out.extend(orjson.loads(b"[" + raw[bounds[i] : ends[j]] + b"]"))
        return out

    def _object(self, bounds: list[int], ends: list[int], colons: np.ndarray) -> dict:
        out: dict = {}
        raw = self.raw
        for i, j, large in self._batches(bounds, ends):
            if not large:
                out.update(orjson.loads(b"{" + raw[bounds[i] : ends[j]] + b"}"))
                continue
            at = int(np.searchsorted(colons, bounds[i]))
            if at >= len(colons) or colons[at] >= ends[i]:
                raise _invalid("an object member without ':'")
            colon = int(colons[at])
            key = orjson.loads(raw[bounds[i] : colon])
            if not isinstance(key, str):
                raise _invalid("an object key that is not a string")
            out[key] = self._value(colon + 1, ends[i])
        return out

    def _value(self, lo: int, hi: int) -> Any:
        """The value in raw[lo:hi] (whitespace around it allowed): a container in pieces, else one call."""
        raw, s = self.raw, self.s
        start = _skip_space(raw, lo, hi)
        if start < hi and raw[start] in b"[{":
            t = int(np.searchsorted(s.pos, start))
            value, end = self.container(t)
            if _skip_space(raw, end, hi) != hi:
                raise _invalid("text after a value")
            return value
        return orjson.loads(raw[lo:hi])


# Serialising --------------------------------------------------------------------------------------------------
def dumps(obj: Any, option: int = 0, piece: int = PIECE) -> bytes:
    """``orjson.dumps(obj, option=option)``, written in pieces of about `piece` bytes (module docstring)."""
    if _weight(obj, piece) < piece:
        return orjson.dumps(obj, option=option)
    return b"".join(_Writer(option, piece).write(obj))


def _weight(obj: Any, limit: int) -> int:
    """About how many bytes `obj` serialises to, counted only up to `limit` (so the count is cheap)."""
    total = 0
    stack = [obj]
    while stack and total < limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            total += 2 + 2 * len(item)
            for k, v in item.items():
                total += len(k) + 2
                stack.append(v)
                if total >= limit:
                    break
        elif isinstance(item, list | tuple):
            total += 2 + len(item)
            stack.extend(item[: limit - total] if total < limit else ())
        else:
            total += 8
    return total


class _Writer:
    def __init__(self, option: int, piece: int):
        self.option, self.piece = option, piece
        self.sort = bool(option & orjson.OPT_SORT_KEYS)

    def write(self, obj: Any) -> Iterator[bytes]:
        if isinstance(obj, str):
            yield from self._string(obj)
        elif isinstance(obj, dict):
            yield from self._dict(obj)
        elif isinstance(obj, list | tuple):
            yield from self._list(obj)
        else:
            yield orjson.dumps(obj, option=self.option)

    def _string(self, s: str) -> Iterator[bytes]:
        if len(s) <= self.piece:
            yield orjson.dumps(s)
            return
        yield b'"'
        for i in range(0, len(s), self.piece):
            yield orjson.dumps(s[i : i + self.piece])[1:-1]  # JSON escapes one code point at a time
        yield b'"'

    def _list(self, items: Any) -> Iterator[bytes]:
        yield b"["
        batch: list = []
        size = 0
        first = True
        for item in items:
            w = _weight(item, self.piece)
            if w >= self.piece or size + w > self.piece:
                if batch:
                    yield (b"" if first else b",") + orjson.dumps(batch, option=self.option)[1:-1]
                    first, batch, size = False, [], 0
                if w >= self.piece:
                    if not first:
                        yield b","
                    yield from self.write(item)
                    first = False
                    continue
            batch.append(item)
            size += w
        if batch:
            yield (b"" if first else b",") + orjson.dumps(batch, option=self.option)[1:-1]
        yield b"]"

    def _dict(self, obj: dict) -> Iterator[bytes]:
        keys = sorted(obj) if self.sort else list(obj)
        yield b"{"
        batch: dict = {}
        size = 0
        first = True
        for k in keys:
            v = obj[k]
            w = _weight(v, self.piece) + len(k)
            if w >= self.piece or size + w > self.piece:
                if batch:
                    yield (b"" if first else b",") + orjson.dumps(batch, option=self.option)[1:-1]
                    first, batch, size = False, {}, 0
                if w >= self.piece:
                    yield (b"" if first else b",") + orjson.dumps(k) + b":"
                    yield from self.write(v)
                    first = False
                    continue
            batch[k] = v
            size += w
        if batch:
            yield (b"" if first else b",") + orjson.dumps(batch, option=self.option)[1:-1]
        yield b"}"
