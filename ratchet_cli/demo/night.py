"""The demo's nights and release control.

``python -m ratchet_cli.demo.night DAY OUT.json [RUN_CONFIG_JSON]`` runs the code location's ``nightly`` job for
partition DAY in the Dagster instance of ``$DAGSTER_HOME`` (the one `dagster dev` shows, so each night appears in
the UI's runs and asset lineage) and writes a summary: which assets materialised (with their key metadata), which
checks passed, which steps failed and why, and how long each step took (``step_seconds``: the run's step events).
A home that records its partition window (``ratchet_core.partition_window``) has it widened to DAY first.
RUN_CONFIG_JSON is the job's run config: ``lora_adapter``'s defaults are the training settings the demo certifies
with; it passes the torch thread count (``--train-threads``, not part of the config hash) and what
``--train-epochs`` / ``--train-min-steps`` override (``night_run_config``).
It runs in its own process so a night never shares memory with the demo's driver and Ctrl-C can stop it by process
group.

``release_tick_once``: one evaluation of release control (what Dagster's ``release_promotion_sensor`` runs each
tick), and ``reconcile_adapters_once`` (``adapter_reconciler``'s pass), for ``ratchet demo --no-dagster-ui`` where
no daemon runs the sensors.
``serving_stages``: what the latest verified release manifest says each task is served by.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NIGHT_JOB = "nightly"
# The sensor's release rule (ratchet_assets.defs.release_sensors._release_rule with NightConfig's default target 0.95).
PROMOTE_TARGET = 0.95
ROLLBACK_FLOOR = 0.90


# --- the night, in its own process -------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    inner = getattr(value, "value", value)
    if isinstance(inner, str | int | float | bool) or inner is None:
        return inner
    return str(inner)


def night_run_config(
    train_epochs: int | None = None, train_min_steps: int | None = None, train_threads: int | None = 0
) -> dict[str, Any] | None:
    """The nightly job's run config for what the demo's options override (None: nothing).

    ``lora_adapter``'s defaults (``ratchet_assets.night.adapter.NIGHT_TRAINING``: at least min_steps steps, then
    epochs until the validation split stops improving (early stopping), PII surrogates) are the settings the demo
    certifies with. The demo passes one thing by default, the torch thread count (``train_threads``, 0 = every CPU,
    idle threads sleeping: a demo's night has the machine to itself, and two threads train the demo base ~1.4x
    faster on 2 cores; ``LoraTrainConfig.num_threads``). It is not part of the config hash, so a rerun from the
    Dagster UI without run config reuses the night's adapter. An epochs or min_steps override (tests pass
    ``min_steps=0`` to keep tiny nights short) is another training config: the UI would train again for it.
    ``train_threads=None`` leaves the asset's own thread count (one).
    """
    config: dict[str, Any] = {}
    if train_epochs:
        config["epochs"] = int(train_epochs)
    if train_min_steps is not None:
        config["min_steps"] = int(train_min_steps)
    if train_threads is not None:
        config["num_threads"] = int(train_threads)
    return {"ops": {"lora_adapter": {"config": config}}} if config else None


def step_seconds(instance: Any, run_id: str) -> list[tuple[str, float | None]]:
    """Each step of the run in the order it started, with its seconds from the step's start to its success or
    failure as Dagster's event log recorded them (None: it never ended)."""
    import dagster as dg

    started: dict[str, float] = {}
    ended: dict[str, float] = {}
    kinds = {
        dg.DagsterEventType.STEP_START,
        dg.DagsterEventType.STEP_SUCCESS,
        dg.DagsterEventType.STEP_FAILURE,
    }
    for entry in instance.all_logs(run_id, of_type=kinds):
        if not entry.step_key or entry.dagster_event is None:
            continue
        if entry.dagster_event.event_type == dg.DagsterEventType.STEP_START:
            started.setdefault(entry.step_key, entry.timestamp)
        else:
            ended[entry.step_key] = entry.timestamp
    order = sorted(started, key=started.__getitem__)
    return [(k, round(ended[k] - started[k], 2) if k in ended else None) for k in order]


def describe_steps(steps: list[tuple[str, float | None]] | list[list[Any]]) -> str:
    """``traffic 1.2 s, examples 0.8 s, ...`` (a step that never ended: ``lora_adapter -``)."""
    return ", ".join(f"{k} {'-' if v is None else f'{v:.1f} s'}" for k, v in steps)


def _run_night(day: str, run_config: dict[str, Any] | None = None) -> dict[str, Any]:
    import dagster as dg

    from ratchet_assets.definitions import defs as load_defs
    from ratchet_assets.run_trace import trace_run
    from ratchet_core.settings import load_settings

    loading = time.monotonic()
    job = load_defs().resolve_job_def(NIGHT_JOB)
    started = time.monotonic()
    with dg.DagsterInstance.get() as instance:
        result = job.execute_in_process(
            partition_key=day,
            instance=instance,
            run_config=run_config or None,
            raise_on_error=False,
            tags={"ratchet/source": "ratchet-demo"},
        )
        materialised: dict[str, dict[str, Any]] = {}
        for event in result.get_asset_materialization_events():
            mat = event.materialization
            assert mat is not None
            materialised[mat.asset_key.to_user_string()] = {k: _plain(v) for k, v in mat.metadata.items()}
        checks = {e.check_name: bool(e.passed) for e in result.get_asset_check_evaluations()}
        failures = {}
        for event in result.all_events:
            if event.event_type_value == "STEP_FAILURE":
                err = event.event_specific_data.error  # type: ignore[union-attr]
                message = (err.message if err is not None else "failed").strip().splitlines()
                first = message[0] if message else "failed"
                failures[event.step_key or "?"] = re.sub(r"^[\w.]+(Error|Failure|Exception): ", "", first)
        skipped = [e.step_key for e in result.all_events if e.event_type_value == "STEP_SKIPPED"]
        steps = step_seconds(instance, result.run_id)
        endpoint = load_settings().otel_endpoint
        if endpoint:  # no daemon may run the trace sensors (--no-dagster-ui): export the night's trace here
            trace_run(instance, result.run_id, endpoint)
    return {
        "day": day,
        "run_id": result.run_id,
        "success": result.success,
        "seconds": round(time.monotonic() - started, 1),
        "load_seconds": round(started - loading, 1),  # importing and loading the code location
        "steps": steps,
        "materialised": materialised,
        "checks": checks,
        "failures": failures,
        "skipped": sorted(s for s in skipped if s),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(
            "usage: python -m ratchet_cli.demo.night YYYY-MM-DD OUT.json [RUN_CONFIG_JSON]", file=sys.stderr
        )
        return 2
    day, out = args[:2]
    from ratchet_core.partition_window import widen_window
    from ratchet_core.settings import load_settings

    widen_window(load_settings().home, day)  # a home that records its days: this one is a partition too
    summary = _run_night(day, json.loads(args[2]) if len(args) == 3 else None)
    tmp = Path(out).with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2, sort_keys=True))
    os.replace(tmp, out)
    return 0 if summary["success"] else 3


# --- the driver's side --------------------------------------------------------------------------------------------
@dataclass
class NightResult:
    day: str
    exit_code: int
    log_path: Path
    summary: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float | None = (
        None  # the night's process, start to exit (Python and Dagster start-up included)
    )

    @property
    def materialised(self) -> list[str]:
        return sorted(self.summary.get("materialised", {}))

    def meta(self, asset: str, key: str) -> Any:
        return self.summary.get("materialised", {}).get(asset, {}).get(key)


def run_night(
    day: str,
    env: dict[str, str],
    logs: Path,
    timeout_s: float = 3600.0,
    run_config: dict[str, Any] | None = None,
) -> NightResult:
    """Run the night of `day` in a child process (own process group); Ctrl-C interrupts it cleanly."""
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"night-{day}.log"
    out = logs / f"night-{day}.json"
    out.unlink(missing_ok=True)
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ratchet_cli.demo.night",
                day,
                str(out),
                *([json.dumps(run_config)] if run_config else []),
            ],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=env.get("DAGSTER_HOME") or None,
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except BaseException:  # Ctrl-C, SIGTERM or the timeout: let Dagster mark the run, then make sure
            _stop(proc)
            raise
    summary = json.loads(out.read_text()) if out.exists() else {}
    return NightResult(day, code, log_path, summary, round(time.monotonic() - started, 1))


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGINT, 20.0), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def release_tick_once(home: Path, state: dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """One release-control evaluation; returns (new state, what it did or None when it held)."""
    from ratchet_assets.release.control import release_tick
    from ratchet_assets.release.decision import ReleaseRule
    from ratchet_core.control_db import make_engine
    from ratchet_core.keys import signing_key
    from ratchet_core.settings import load_settings

    settings = load_settings()
    engine = make_engine(settings.control_db_url)
    try:
        result = release_tick(
            engine,
            signing_key(settings),
            settings.lake_root,
            Path(settings.artifacts_root),
            state or None,
            rule=ReleaseRule(target=PROMOTE_TARGET, floor=ROLLBACK_FLOOR),
        )
    finally:
        engine.dispose()
    return result.state, (result.summary() if result.acted else None)


def reconcile_adapters_once(home: Path, student_url: str) -> str | None:
    """One pass of the adapter reconciler (what Dagster's ``adapter_reconciler`` runs every 30 s) for
    ``--no-dagster-ui``; returns what it did or what is missing, None when the endpoint holds what it should."""
    from ratchet_assets.release.adapters import reconcile
    from ratchet_core.control_db import make_engine
    from ratchet_core.settings import load_settings
    from ratchet_stats.keys import load_public_key

    settings = load_settings()
    engine = make_engine(settings.control_db_url)
    try:
        public = load_public_key((home / "keys" / "signing.pub").read_bytes())
        _, reports = reconcile(
            engine, [public], [(student_url, settings.student_api_key)], Path(settings.artifacts_root)
        )
    finally:
        engine.dispose()
    lines = [r.summary() for r in reports if r.acted or r.drift]
    return "; ".join(lines) or None


def serving_stages(home: Path, tasks: list[str]) -> dict[str, dict[str, Any]]:
    """Per task: stage, version and canary share from the newest manifest that verifies under the home's key."""
    from ratchet_core import manifest as mf
    from ratchet_core.control_db import ensure_schema, make_engine
    from ratchet_core.keys import root_public_keys
    from ratchet_core.settings import load_settings

    settings = load_settings()
    engine = make_engine(settings.control_db_url)
    try:
        ensure_schema(engine)
        manifest, _ = mf.latest_verified(engine, root_public_keys(settings))
    finally:
        engine.dispose()
    manifest = manifest or mf.Manifest.default()
    out = {}
    for task in tasks:
        rel = manifest.serving(task)
        out[task] = {
            "stage": rel.stage,
            "version": rel.version,
            "canary_percent": rel.canary_percent,
            "previous_live": rel.previous_live,
        }
    return out


def describe_stage(s: dict[str, Any]) -> str:
    if s["stage"] == "teacher":
        return "teacher"
    share = f" {s['canary_percent']:g}%" if s["stage"] == "canary" else ""
    rest = ""
    if s["stage"] in ("shadow", "canary") and s.get("previous_live"):
        rest = f" (live {s['previous_live']} serves the rest)"
    return f"{s['stage']}{share} {s['version']}{rest}"


if __name__ == "__main__":
    sys.exit(main())
