"""`ratchet`: one console script, subcommands loaded lazily so `ratchet stats ...` never imports torch or Dagster.

Each subcommand lives in its own module and is listed in COMMANDS as ``name -> "module:attribute"``; the
attribute is a click command. A command whose module is not part of this install is not listed.
The auditor's commands (`stats`, `verify`, `keygen`) are implemented by ratchet_stats' own CLI, which has no
dependency beyond scipy and cryptography, so `python -m ratchet_stats ...` works identically.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import click

import ratchet_core  # noqa: F401  (first: it keeps litellm from fetching its price map when a command imports it)

COMMANDS: dict[str, str] = {
    "init": "ratchet_cli.init_cmd:init",
    "config": "ratchet_cli.config_cmd:config",
    "doctor": "ratchet_cli.doctor_cmd:doctor",
    "stats": "ratchet_cli.passthrough:stats",
    "verify": "ratchet_cli.passthrough:verify",
    "keygen": "ratchet_cli.passthrough:keygen",
    "proof": "ratchet_cli.proof_cmd:proof",
    "gateway": "ratchet_gateway.cli:gateway",
    "student-server": "ratchet_gateway.student_server.cli:student_server",
    "demo-teacher": "ratchet_gateway.demo_teacher.cli:demo_teacher",
    "traffic": "ratchet_cli.traffic_cmd:traffic",
    "admin": "ratchet_assets.admin.cli:admin",
    "import": "ratchet_assets.governance.cli:import_cmd",
    "export": "ratchet_assets.governance.cli:export_cmd",
    "demo": "ratchet_cli.demo_cmd:demo",
    "sim": "ratchet_assets.sim.cli:sim",
    "effects": "ratchet_cli.effect_gate_cmd:effects",
    "scout": "ratchet_agents.scout.cli:scout",
    "liverun": "ratchet_cli.liverun_cmd:liverun",
    "replay": "ratchet_assets.replay.cli:replay_cmd",
    "cost": "ratchet_assets.defs.cost_report:cost",
}


def _available(target: str) -> bool:
    module = target.split(":", 1)[0]
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand runs."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name, target in COMMANDS.items() if _available(target))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None or not _available(target):
            return None
        module_name, attr = target.split(":", 1)
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Short help without importing heavy modules: read it from the module's COMMAND_HELP if cheap.
        rows = []
        for name in self.list_commands(ctx):
            rows.append((name, _SHORT_HELP.get(name, "")))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


_SHORT_HELP = {
    "init": "Create $RATCHET_HOME, a signing key and a server pepper.",
    "import": "Import labelled chat examples for a task as golden or training rows.",
    "export": "Export requests, examples, golden rows and receipts with a verifiable manifest.",
    "config": "Check the RATCHET_* configuration.",
    "doctor": "Check the configured teacher with real, capped requests (doctor teacher).",
    "stats": "Exact statistics: plan, bound, mcnemar, ltt.",
    "verify": "Verify signed evidence offline (manifest, certificate, receipt, bom, proof).",
    "keygen": "Generate an Ed25519 signing key.",
    "proof": "Example keys and training-set membership proofs.",
    "gateway": "Serve the OpenAI-compatible gateway.",
    "student-server": "Serve the local student model with vLLM's LoRA API.",
    "demo-teacher": "Serve the demo teacher that answers the built-in workloads.",
    "traffic": "Drive an OpenAI-compatible endpoint with a built-in workload.",
    "admin": "Operate releases: versions, promote, rollback, flags, effects, trusted keys, audit log.",
    "demo": "Run the whole loop on this machine.",
    "sim": "Simulate days of traffic, training and release offline.",
    "effects": "Serve the effect gate (approvals, attempts, spend caps) over HTTP and MCP.",
    "scout": "Ask Scout, the research agents, a question through the gateway.",
    "liverun": "Plan, smoke-test, run, report and verify a capped live run.",
    "replay": "What stored traffic would have served and paid at another threshold, audit rate or target.",
    "cost": "Cost report: teacher spend, student GPU time, training, break-even volume.",
}


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ratchet", prog_name="ratchet")
def cli() -> None:
    """Ratchet: serve a cheap student model where exact statistics prove it is good enough, and sign every claim."""


def main(argv: list[str] | None = None) -> None:
    # Everything a Ratchet process creates (keys, ledger, journal, lake, artifacts, control DB under
    # $RATCHET_HOME; the services it starts inherit it) is private to the user: files 0600, folders 0700
    # (ratchet_core.home_files).
    os.umask(0o077)
    cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="ratchet")


if __name__ == "__main__":  # pragma: no cover
    main()
