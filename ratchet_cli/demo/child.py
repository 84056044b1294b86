"""``python -m ratchet_cli.demo.child <ratchet subcommand ...>``: run a `ratchet` command (the gateway) with the
accelerated clock's variables ``RATCHET_DAY_SECONDS`` / ``RATCHET_CLOCK_START`` set.

``ratchet_core.settings.unknown_variables`` does not list those two as known yet, so ``load_settings`` would
refuse them as typos; the clock (``ratchet_core.clock``) and the gateway read them directly. This wrapper accepts
exactly those two names and nothing else; it becomes a plain pass-through once the settings know them.
"""

from __future__ import annotations

import sys

CLOCK_VARIABLES = frozenset({"RATCHET_DAY_SECONDS", "RATCHET_CLOCK_START"})


def accept_clock_variables() -> None:
    from ratchet_core import settings

    original = settings.unknown_variables
    if getattr(original, "_accepts_clock", False):
        return

    def unknown_variables(environ: dict[str, str] | None = None) -> list[str]:
        return [name for name in original(environ) if name.upper() not in CLOCK_VARIABLES]

    unknown_variables._accepts_clock = True  # type: ignore[attr-defined]
    settings.unknown_variables = unknown_variables


def main(argv: list[str] | None = None) -> None:
    accept_clock_variables()
    from ratchet_cli.main import main as ratchet_main

    ratchet_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
