"""The parts both answer paths (``complete``, ``relay``) use, built once per app and API by ``ChatHandler``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratchet_gateway.chat.formats import ApiFormat
from ratchet_gateway.chat.pairs import Pairs
from ratchet_gateway.chat.rows import Recorder
from ratchet_gateway.chat.student import Student
from ratchet_gateway.upstream import Timeouts

if TYPE_CHECKING:
    from ratchet_gateway.state import Gateway


@dataclass(frozen=True, slots=True)
class Parts:
    gw: Gateway
    api: ApiFormat  # the caller's API (``formats``)
    student: Student
    recorder: Recorder
    pairs: Pairs
    teacher_timeouts: Timeouts
