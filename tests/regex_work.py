"""How much work a backtracking regular-expression engine does on a text, counted, not timed.

:func:`scan_work` runs a pattern over a text the way ``pattern.finditer``/``pattern.sub`` do (a match attempt at
each position, leftmost-first backtracking, the next attempt after the end of a match) with a small backtracking
matcher over the pattern's parse tree (``re._parser``), and counts its steps: one per node tried and one per
character a repeat looks at. The count is deterministic, so a test can say "the work grows linearly with the
text" without a clock: a quadratic pattern does ~16x the work on a text 4x as long, a linear one ~4x.

The matcher explores the same search tree as Python's ``re`` and the ``regex`` package (greedy repeats try the
longest first, possessive repeats and atomic groups never give back, lookarounds are atomic); engines prune it
further with optimisations, never less, so linear work here means linear work there. :func:`scan_spans` returns
the matches it found, which tests compare with the real engine's (the oracle that the matcher is faithful).

Supported: literals, classes (ranges, ``\\d \\w \\s`` and their negations, negated classes), ``.``, groups,
alternation, greedy, lazy and possessive repeats, atomic groups, lookahead and fixed-width lookbehind, ``\\b``
``\\B`` ``^`` ``$`` ``\\A`` ``\\Z``, back-references and scoped or global ``(?i)``. Anything else raises.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

MAXREPEAT = C.MAXREPEAT


class TooMuchWork(Exception):
    """The count passed the caller's budget (a catastrophic pattern: stop rather than hang)."""


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


_CATEGORIES: dict[object, Callable[[str], bool]] = {
    C.CATEGORY_DIGIT: str.isdecimal,
    C.CATEGORY_NOT_DIGIT: lambda ch: not ch.isdecimal(),
    C.CATEGORY_WORD: _is_word,
    C.CATEGORY_NOT_WORD: lambda ch: not _is_word(ch),
    C.CATEGORY_SPACE: str.isspace,
    C.CATEGORY_NOT_SPACE: lambda ch: not ch.isspace(),
}


def _fold(ch: str) -> set[str]:
    return {ch, ch.lower(), ch.upper()}


def _char_test(op, av, icase: bool) -> Callable[[str], bool] | None:
    """A one-character predicate for a single-character node, or None when the node is not one."""
    if op is C.LITERAL:
        want = chr(av)
        if icase:
            folded = _fold(want)
            return lambda ch: ch in folded or ch.lower() in folded
        return lambda ch: ch == want
    if op is C.NOT_LITERAL:
        inner = _char_test(C.LITERAL, av, icase)
        return lambda ch: not inner(ch)  # type: ignore[misc]
    if op is C.ANY:
        return lambda ch: ch != "\n"
    if op is C.IN:
        negate = bool(av) and av[0][0] is C.NEGATE
        tests = []
        for iop, iav in av[1:] if negate else av:
            if iop is C.LITERAL:
                tests.append(_char_test(C.LITERAL, iav, icase))
            elif iop is C.RANGE:
                lo, hi = iav
                if icase:
                    tests.append(lambda ch, lo=lo, hi=hi: any(lo <= ord(c) <= hi for c in _fold(ch)))
                else:
                    tests.append(lambda ch, lo=lo, hi=hi: lo <= ord(ch) <= hi)
            elif iop is C.CATEGORY:
                tests.append(_CATEGORIES[iav])
            else:
                raise NotImplementedError(f"class item {iop}")
        if negate:
            return lambda ch: not any(t(ch) for t in tests)
        return lambda ch: any(t(ch) for t in tests)
    return None


class _Matcher:
    def __init__(self, pattern: str, flags: int, budget: int):
        tree = P.parse(pattern, flags)
        self.icase = bool(tree.state.flags & C.SRE_FLAG_IGNORECASE)
        self.tree = list(tree.data)
        self.groups = tree.state.groups
        self.steps = 0
        self.budget = budget
        self.text = ""

    def _step(self, n: int = 1) -> None:
        self.steps += n
        if self.steps > self.budget:
            raise TooMuchWork(f"more than {self.budget} steps")

    def width(self, seq) -> int:
        lo, hi = P.SubPattern(P.State(), list(seq)).getwidth()
        if lo != hi:
            raise NotImplementedError("variable-width lookbehind")
        return lo

    # seq: list of (op, av); k: continuation(pos, caps) -> end | None
    def match(self, seq, i: int, pos: int, caps: dict, icase: bool, k) -> int | None:
        if i == len(seq):
            return k(pos, caps)
        self._step()
        op, av = seq[i]
        text = self.text
        test = _char_test(op, av, icase)
        if test is not None:
            if pos < len(text) and test(text[pos]):
                return self.match(seq, i + 1, pos + 1, caps, icase, k)
            return None
        if op is C.AT:
            if self._at(av, pos):
                return self.match(seq, i + 1, pos, caps, icase, k)
            return None
        if op is C.SUBPATTERN:
            group, add, dele, sub = av
            inner_icase = (icase or bool(add & C.SRE_FLAG_IGNORECASE)) and not (dele & C.SRE_FLAG_IGNORECASE)
            start = pos

            def after(p, c, group=group, start=start):
                if group is not None:
                    c = {**c, group: (start, p)}
                return self.match(seq, i + 1, p, c, icase, k)

            return self.match(list(sub), 0, pos, caps, inner_icase, after)
        if op is C.BRANCH:
            for alt in av[1]:
                end = self.match(list(alt) + list(seq[i + 1 :]), 0, pos, caps, icase, k)
                if end is not None:
                    return end
            return None
        if op in (C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT):
            return self._repeat(op, av, seq, i, pos, caps, icase, k)
        if op is C.ATOMIC_GROUP:
            got: list = []
            self.match(list(av), 0, pos, caps, icase, lambda p, c: got.append((p, c)) or p)
            if not got:
                return None
            return self.match(seq, i + 1, got[0][0], got[0][1], icase, k)
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, sub = av
            sub = list(sub)
            if direction == 1:
                found = self.match(sub, 0, pos, caps, icase, lambda p, c: p) is not None
            else:
                w = self.width(sub)
                found = pos - w >= 0 and (
                    self.match(sub, 0, pos - w, caps, icase, lambda p, c: p if p == pos else None) is not None
                )
            if found == (op is C.ASSERT):
                return self.match(seq, i + 1, pos, caps, icase, k)
            return None
        if op is C.GROUPREF:
            span = caps.get(av)
            if span is None:
                return None
            piece = text[span[0] : span[1]]
            self._step(len(piece))
            if text.startswith(piece, pos):
                return self.match(seq, i + 1, pos + len(piece), caps, icase, k)
            return None
        raise NotImplementedError(f"regex node {op}")

    def _at(self, code, pos: int) -> bool:
        text = self.text
        if code is C.AT_BOUNDARY or code is C.AT_NON_BOUNDARY:
            before = pos > 0 and _is_word(text[pos - 1])
            after = pos < len(text) and _is_word(text[pos])
            return (before != after) == (code is C.AT_BOUNDARY)
        if code in (C.AT_BEGINNING, C.AT_BEGINNING_STRING):
            return pos == 0
        if code is C.AT_END_STRING:
            return pos == len(text)
        if code is C.AT_END:
            return pos == len(text) or (pos == len(text) - 1 and text[pos] == "\n")
        raise NotImplementedError(f"anchor {code}")

    def _repeat(self, op, av, seq, i, pos, caps, icase, k):
        lo, hi, body = av
        body = list(body)
        rest = lambda p, c: self.match(seq, i + 1, p, c, icase, k)  # noqa: E731
        single = _char_test(*body[0], icase) if len(body) == 1 else None
        if single is not None:  # one character per iteration: count the run, then try the rest
            text, n = self.text, 0
            limit = len(text) if hi == MAXREPEAT else min(len(text), pos + hi)
            while pos + n < limit and single(text[pos + n]):
                n += 1
            self._step(n + 1)
            if n < lo:
                return None
            if op is C.POSSESSIVE_REPEAT:
                return rest(pos + n, caps)
            counts = range(n, lo - 1, -1) if op is C.MAX_REPEAT else range(lo, n + 1)
            for count in counts:
                self._step()
                end = rest(pos + count, caps)
                if end is not None:
                    return end
            return None
        if op is C.POSSESSIVE_REPEAT:
            count, p, c = 0, pos, caps
            while count < hi:
                got: list = []
                self.match(body, 0, p, c, icase, lambda q, cc, got=got: got.append((q, cc)) or q)
                if not got or got[0][0] == p:
                    break
                p, c = got[0]
                count += 1
            return rest(p, c) if count >= lo else None

        def iterate(count: int, p: int, c: dict) -> int | None:
            def again(q, cc):
                if q == p:  # an empty iteration: stop repeating (as the engines do)
                    return None
                return iterate(count + 1, q, cc)

            if op is C.MAX_REPEAT:
                if count < hi:
                    end = self.match(body, 0, p, c, icase, again)
                    if end is not None:
                        return end
                return rest(p, c) if count >= lo else None
            if count >= lo:
                end = rest(p, c)
                if end is not None:
                    return end
            return self.match(body, 0, p, c, icase, again) if count < hi else None

        return iterate(0, pos, caps)

    def scan(self, text: str) -> list[tuple[int, int]]:
        self.text = text
        spans, pos = [], 0
        while pos <= len(text):
            end = self.match(self.tree, 0, pos, {}, self.icase, lambda p, c: p)
            if end is None:
                pos += 1
                continue
            spans.append((pos, end))
            pos = end if end > pos else pos + 1
        return spans


def _in_big_stack(fn: Callable[[], object]) -> object:
    """Run `fn` in a thread with a deep stack: the matcher recurses once per repeat iteration."""
    out: list = []
    err: list = []

    def run() -> None:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(1_000_000)
        try:
            out.append(fn())
        except BaseException as exc:  # re-raised in the caller's thread
            err.append(exc)
        finally:
            sys.setrecursionlimit(limit)

    old = threading.stack_size(512 * 1024 * 1024)
    try:
        t = threading.Thread(target=run)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    if err:
        raise err[0]
    return out[0]


_FLAGS = re.IGNORECASE | re.MULTILINE | re.DOTALL | re.VERBOSE  # the same bits in ``regex``


def _source(pattern: Any) -> tuple[str, int]:
    """(source, flags) of a pattern string or a compiled ``re`` or ``regex`` pattern."""
    if isinstance(pattern, str):
        return pattern, 0
    return pattern.pattern, pattern.flags & _FLAGS


def scan_work(pattern: Any, text: str, budget: int = 50_000_000) -> int:
    """Steps a backtracking engine takes to find every match of `pattern` (a string, or a compiled ``re`` or
    ``regex`` pattern) in `text`; TooMuchWork past `budget`."""
    m = _Matcher(*_source(pattern), budget)
    _in_big_stack(lambda: m.scan(text))
    return m.steps


def scan_spans(pattern: Any, text: str) -> list[tuple[int, int]]:
    """The spans of the matches the counting matcher finds (compare with ``finditer``'s)."""
    m = _Matcher(*_source(pattern), 10**12)
    return _in_big_stack(lambda: m.scan(text))  # type: ignore[return-value]
