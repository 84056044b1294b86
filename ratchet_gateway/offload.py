"""Work proportional to a large request body, off the event loop: the large-body lane.

A request whose body is larger than ``request_body.LARGE_BODY_BYTES`` (64 KiB) is parsed and validated, redacted,
turned into its ledger columns and encoded for the upstream and the journal in this lane: a small thread pool of
its own, so large bodies queue behind each other and never take the event loop or the threads the ledger and the
default executor need. Each step runs in short calls (``json_pieces``, ``request_body.validate_chat_body``'s
slices, ``ratchet_core.redact``'s GIL-free matching), so while a worker thread holds the GIL, the interpreter hands
it to the event loop every ``sys.getswitchinterval()`` seconds (1 ms in ``ratchet gateway``). A small body does the
same steps inline: a few microseconds each, cheaper than a thread hop.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

# One worker: a large body's steps use one core at a time and the event loop keeps the other.
LANE_WORKERS = 1
# The lane's thread runs at a lower CPU priority (nice +10) than the event loop's: when the cores are busy, the
# scheduler runs the loop first, so a large body waits, not every other request.
LANE_NICE = 10


def _lower_priority() -> None:
    # Linux: this thread only; elsewhere (or not allowed) the lane runs at the loop's priority
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LANE_NICE)


class Offload:
    """The lane (one per gateway): ``await offload.run(fn, *args)`` runs ``fn(*args)`` in its thread."""

    def __init__(self, workers: int = LANE_WORKERS):
        self._pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="ratchet-large", initializer=_lower_priority
        )

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
