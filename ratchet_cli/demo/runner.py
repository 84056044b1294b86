"""The demo's day loop: start the services, drive each day's traffic through the gateway, run each night.

A day: ``bursts`` bursts of the built-in workload spread over the first 80% of the day (``run_traffic``), then
wait for the day to end on Ratchet's clock and for the gateway to seal its last segment (two sealing intervals
after the last answer, and until the lake holds every request the gateway answered), then the night
(``ratchet_cli.demo.night``), then one line per day: requests, share served by the student, accuracy, the night's
steps and their seconds, the receipt, the certificate and every task's stage. On the accelerated clock a day's
traffic always stays in its day: the clock waits for it (``ratchet_cli.demo.state``). Release control and the adapter
reconciler run in Dagster's daemon (``release_promotion_sensor``, ``adapter_reconciler``) when `dagster dev` runs,
else here between bursts (``--no-dagster-ui``).
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from ratchet_cli.demo.costs import demo_price_env, side_by_side
from ratchet_cli.demo.night import (
    describe_stage,
    describe_steps,
    night_run_config,
    reconcile_adapters_once,
    release_tick_once,
    run_night,
    serving_stages,
)
from ratchet_cli.demo.state import (
    DayClock,
    DemoState,
    hold_clock_at,
    next_day,
    real_day_clock,
    set_accelerated_clock,
)
from ratchet_cli.demo.supervisor import Service, Supervisor
from ratchet_core.layout import ArtifactLayout
from ratchet_core.partition_window import PartitionWindow, write_window

REPO_ROOT = Path(__file__).resolve().parents[2]
TASKS = ["tickets", "extract", "tools"]
TRAFFIC_SPAN = 0.8  # share of the day over which the bursts are spread; the rest lets the last segment seal


@dataclass
class DemoOptions:
    home: Path
    days: int | None = None  # total days the demo runs (None: until Ctrl-C)
    day_seconds: float | None = None  # None: real UTC days
    requests_per_day: int = 360
    workload: str = "mixed"
    dagster_ui: bool = True
    clock_start: str = "2026-01-01"
    bursts: int = 6
    concurrency: int = 4
    stream_share: float = 0.1
    # lora_adapter's epochs and min_steps a night (None: the asset's default, what the demo certifies with)
    train_epochs: int | None = None
    train_min_steps: int | None = None
    train_threads: int | None = 0  # torch threads a night trains with (0: every CPU; None: the asset's one)
    gateway_port: int = 8100
    teacher_port: int = 8101
    student_port: int = 8102
    dagster_port: int = 3000
    ready_timeout_s: float = 300.0

    @property
    def accelerated(self) -> bool:
        return self.day_seconds is not None

    @property
    def segment_seconds(self) -> float:
        # Seal often enough that a day's last rows are in the lake soon after it ends.
        return 60.0 if self.day_seconds is None else max(1.0, min(10.0, self.day_seconds / 10.0))


def write_instance_config(dagster_home: Path) -> Path:
    """``$DAGSTER_HOME/dagster.yaml`` from the repo's, with the SQLite folder made absolute (a relative
    ``base_dir`` is resolved against each process's working directory, so `dagster dev` and a night started
    elsewhere would keep separate run histories)."""
    target = dagster_home / "dagster.yaml"
    source = REPO_ROOT / "dagster.yaml"
    text = source.read_text() if source.exists() else "telemetry:\n  enabled: false\n"
    storage = (dagster_home / "storage").as_posix()
    text = text.replace("base_dir: storage\n", f"base_dir: {storage}\n")
    if "storage:" not in text:
        text = f"storage:\n  sqlite:\n    base_dir: {storage}\n" + text
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
    return target


@dataclass
class Totals:
    sent: int = 0
    ok: int = 0
    correct: int = 0
    served_by: Counter = field(default_factory=Counter)
    by_task: dict[str, Counter] = field(default_factory=dict)
    error_samples: list[str] = field(default_factory=list)
    day_seconds: float | None = None  # real seconds from the day's midnight to its traffic sealed
    past_day_end: float = 0.0  # of which the clock stood at the day's end waiting for its traffic

    def add(self, s: dict[str, Any]) -> None:
        self.sent += s["sent"]
        self.ok += s["ok"]
        self.correct += s["correct"]
        self.served_by.update(s["served_by"])
        for task, c in s["by_task"].items():
            self.by_task.setdefault(task, Counter()).update(c)
        self.error_samples.extend(s["error_samples"][: max(0, 3 - len(self.error_samples))])

    @property
    def student_share(self) -> float:
        return self.served_by.get("student", 0) / self.ok if self.ok else 0.0


Echo = Callable[[str], None]


class DemoRunner:
    def __init__(
        self, options: DemoOptions, echo: Echo, emit: Callable[[dict[str, Any]], None] | None = None
    ):
        self.o = options
        self.home = options.home.resolve()
        self.echo = echo
        self.emit = emit
        self.sup = Supervisor()
        self.state = DemoState()
        self.logs = self.home / "logs"
        self.layout = ArtifactLayout(self.home / "artifacts")  # RATCHET_HOME's default artifacts root
        self.last_tick = 0.0
        self.reports: list[dict[str, Any]] = []

    # environment ------------------------------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("RATCHET_DAY_SECONDS", "RATCHET_CLOCK_START")}
        env.update(
            RATCHET_HOME=str(self.home),
            RATCHET_TEACHER_API_BASE=f"http://127.0.0.1:{self.o.teacher_port}/v1",
            RATCHET_STUDENT_BASE_URL=f"http://127.0.0.1:{self.o.student_port}/v1",
            DAGSTER_HOME=str(self.home / "dagster"),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            PYTHONUNBUFFERED="1",
        )
        env.update(demo_price_env(env))  # the nights' cost_report prices the deployment the demo stands for
        # the release sensor ticks a tenth of an accelerated day, as --no-dagster-ui does; an operator's value stays
        if self.accelerated_tick is not None:
            env.setdefault("RATCHET_RELEASE_TICK_SECONDS", str(self.accelerated_tick))
        return env

    @property
    def accelerated_tick(self) -> int | None:
        """Seconds between release-control evaluations on the accelerated clock: a tenth of a day, at least 2 (None:
        real days, the sensor's own 15 s)."""
        return None if self.o.day_seconds is None else max(2, round(self.o.day_seconds / 10.0))

    def partitions_window(self) -> PartitionWindow | None:
        """First and last day the accelerated demo runs with --days: its days lie far before the wall clock, and the
        UI's Partitions plots graph only the definition's newest 120 partitions. None: real days or no --days.
        ``run`` records it in the home (``ratchet_core.partition_window``) for every Dagster process on it."""
        if not self.o.accelerated or self.o.days is None:
            return None
        st = self.state
        known = [*st.days_done, *([st.open_day] if st.open_day else [])]
        pending = st.open_day if st.open_day and st.open_day not in st.days_done else None
        first_new = pending or (next_day(max(known)) if known else self.o.clock_start)
        remaining = max(1, self.o.days - len(st.days_done))
        last = (date.fromisoformat(first_new) + timedelta(days=remaining - 1)).isoformat()
        return PartitionWindow(min([*known, first_new]), max([*known, last]))

    def gateway_env(self) -> dict[str, str]:
        env = self.base_env()
        env.update(
            RATCHET_API_KEYS=f"demo:{self.state.api_key}",
            RATCHET_SEGMENT_SECONDS=f"{self.o.segment_seconds:g}",
        )
        # the demo's student is one CPU process: two shadow calls at a time (the rest wait their turn) keep its
        # queue short enough that a candidate's shadow pairs are answers, not timeouts (vLLM takes the default 16)
        env.setdefault("RATCHET_SHADOW_MAX_IN_FLIGHT", "2")
        if self.o.accelerated:
            env.update(RATCHET_DAY_SECONDS=f"{self.o.day_seconds:g}", RATCHET_CLOCK_START=self.o.clock_start)
        return env

    def prepare_dagster_home(self) -> Path:
        dagster_home = self.home / "dagster"
        dagster_home.mkdir(parents=True, exist_ok=True)
        write_instance_config(dagster_home)
        return dagster_home

    # services ---------------------------------------------------------------------------------------------------
    def services(self) -> list[Service]:
        py = sys.executable
        ratchet = [py, "-m", "ratchet_cli.main"]
        o = self.o
        adapters = []
        for version in self.layout.adapter_versions():  # resume: serve what was promoted
            adapters += ["--adapter", f"{version}={self.layout.adapter_dir(version)}"]
        svcs = [
            Service(
                "demo teacher",
                [*ratchet, "demo-teacher", "--port", str(o.teacher_port)],
                self.base_env(),
                f"http://127.0.0.1:{o.teacher_port}/healthz",
                f"http://127.0.0.1:{o.teacher_port}/v1",
                self.logs / "demo-teacher.log",
                o.teacher_port,
            ),
            Service(
                "student server",
                [*ratchet, "student-server", "--port", str(o.student_port), *adapters],
                self.base_env(),
                f"http://127.0.0.1:{o.student_port}/healthz",
                f"http://127.0.0.1:{o.student_port}/v1",
                self.logs / "student-server.log",
                o.student_port,
                ready_timeout_s=o.ready_timeout_s,
            ),
            Service(
                "gateway",
                [
                    py,
                    "-m",
                    "ratchet_cli.demo.child",
                    "gateway",
                    "--port",
                    str(o.gateway_port),
                    "--log-level",
                    "info",
                ],
                self.gateway_env(),
                f"http://127.0.0.1:{o.gateway_port}/readyz",
                f"http://127.0.0.1:{o.gateway_port}/v1",
                self.logs / "gateway.log",
                o.gateway_port,
            ),
        ]
        if o.dagster_ui:
            workspace = REPO_ROOT / "workspace.yaml"
            where = ["-w", str(workspace)] if workspace.exists() else ["-m", "ratchet_assets.definitions"]
            dagster = str(Path(py).with_name("dagster"))
            svcs.append(
                Service(
                    "dagster",
                    [dagster, "dev", *where, "-h", "127.0.0.1", "-p", str(o.dagster_port)],
                    self.base_env(),
                    f"http://127.0.0.1:{o.dagster_port}/server_info",
                    f"http://127.0.0.1:{o.dagster_port}",
                    self.logs / "dagster.log",
                    o.dagster_port,
                    ready_timeout_s=o.ready_timeout_s,
                    cwd=self.home / "dagster",
                )
            )
        return svcs

    def start_services(self) -> None:
        svcs = self.services()
        for svc in svcs:
            self.sup.start(svc)
        for svc in svcs:
            self.echo(f"waiting for {svc.name} ({svc.ready_url}) ...")
            self.sup.wait_ready(svc)
        self.echo("")
        width = max(len(s.name) for s in svcs)
        for svc in svcs:
            self.echo(f"  {svc.name:<{width}}  {svc.url}   log: {svc.log_path}")
        self.echo(
            f"  {'api key':<{width}}  {self.state.api_key}   (client 'demo'; Authorization: Bearer <key>)"
        )
        self.echo(
            f"  try: OPENAI_API_KEY={self.state.api_key} ratchet traffic --base-url "
            f"http://127.0.0.1:{self.o.gateway_port}/v1 --requests 20\n"
        )

    # the loop ---------------------------------------------------------------------------------------------------
    def run(self) -> list[dict[str, Any]]:
        from ratchet_cli.init_cmd import ensure_home

        os.environ["RATCHET_HOME"] = str(self.home)  # this process's own settings (release ticks, manifests)
        os.environ.update(demo_price_env(os.environ))  # ... and the cost report of its last lines
        info = ensure_home(self.home)
        self.echo(f"Ratchet home {info['home']} (signing key id {info['key_id'][:16]}…)")
        self.state = DemoState.load(self.home)
        self.state.save(self.home)
        self.prepare_dagster_home()
        window = self.partitions_window()
        if (
            window is not None
        ):  # Dagster's partitions are the demo's days, now and in any later UI on this home
            write_window(self.home, window)
        mode = f"accelerated: one day = {self.o.day_seconds:g} s" if self.o.accelerated else "real UTC days"
        self.echo(f"clock: {mode}; {self.o.requests_per_day} requests a day ({self.o.workload})")
        if self.o.days is not None and len(self.state.days_done) >= self.o.days:
            self.echo(
                f"all {self.o.days} day(s) already ran in {self.home} ({', '.join(self.state.days_done)}); "
                f"pass --days {len(self.state.days_done) + 1} or more to continue"
            )
            self.print_verify()
            self.print_costs()
            return []
        try:
            self.start_services()
            self.resume_open_day()
            while self.o.days is None or len(self.state.days_done) < self.o.days:
                day = self.next_day()
                totals = self.run_day(day)
                self.night(day, totals)
        finally:
            self.echo("stopping services ...")
            killed = self.sup.stop_all()
            if killed:
                self.echo(f"had to kill: {', '.join(killed)}")
        self.print_verify()
        self.print_costs()
        return self.reports

    def next_day(self) -> str:
        last = self.state.last_day()
        if self.o.accelerated:
            return next_day(last) if last else self.o.clock_start
        from datetime import UTC, datetime

        today = datetime.now(UTC).date().isoformat()
        if self.state.open_day == today:
            return today
        return today if not last or last < today else next_day(last)

    def resume_open_day(self) -> None:
        """A day whose traffic started but whose night did not run: run its night first (real mode: if it is over)."""
        day = self.state.open_day
        if not day or day in self.state.days_done:
            return
        if not self.o.accelerated and time.time() < real_day_clock(day).real_end:
            return  # still today: its remaining bursts run next
        from ratchet_core.lake import Lake
        from ratchet_core.settings import load_settings

        if not Lake(load_settings().lake_root).segments(day):
            self.state.open_day = None  # stopped before any of its traffic was sealed: the day starts over
            self.state.bursts_done.pop(day, None)
            self.state.save(self.home)
            return
        self.echo(f"resuming: {day}'s traffic was interrupted; running its night now")
        self.night(day, Totals())

    def run_day(self, day: str) -> Totals:
        from ratchet_cli.loadgen import run_traffic

        index = self.state.index_of(day)
        if self.state.open_day != day:
            self.state.open_day = day
            self.state.bursts_done = {day: 0}
        self.state.save(self.home)
        done = int(self.state.bursts_done.get(day, 0))
        clock = (
            set_accelerated_clock(self.home, day, self.o.day_seconds, hold_at_day_end=True)
            if self.o.accelerated
            else real_day_clock(day)
        )
        n, b = self.o.requests_per_day, self.o.bursts
        sizes = [n // b + (1 if i < n % b else 0) for i in range(b)]
        total = Totals()
        # a resumed day's earlier bursts are in the lake already
        sealed_before = self.sealed_requests(day) if self.o.accelerated else 0
        self.echo(f"day {day} (#{index + 1}): sending {n} requests in {b} bursts ...")
        for j in range(done, b):
            self.wait_until(clock.real_time_at(TRAFFIC_SPAN * j / b), clock)
            if sizes[j] == 0:
                continue
            summary = run_traffic(
                f"http://127.0.0.1:{self.o.gateway_port}/v1",
                self.state.api_key,
                workload=self.o.workload,
                requests=sizes[j],
                concurrency=self.o.concurrency,
                seed=index * 1000 + j,
                day=index,
                stream_share=self.o.stream_share,
                timeout_s=120.0,
            )
            total.add(summary)
            self.state.bursts_done[day] = j + 1
            self.state.save(self.home)
            self.tick()
        last_answer = time.time()
        self.wait_until(max(clock.real_end, last_answer + 2 * self.o.segment_seconds + 1.0), clock)
        if self.o.accelerated:
            self.wait_sealed(day, sealed_before + total.ok, clock)
            hold_clock_at(self.home, next_day(day), self.o.day_seconds)  # the night runs between the days
            total.day_seconds = round(time.time() - clock.real_start, 1)
            total.past_day_end = round(max(0.0, time.time() - clock.real_end), 1)
        return total

    def sealed_requests(self, day: str) -> int:
        """Answered (200) requests of `day` sealed into the lake so far."""
        import pyarrow.compute as pc

        from ratchet_core.lake import Lake
        from ratchet_core.settings import load_settings

        return sum(
            t.filter(pc.and_(pc.equal(t["kind"], "request"), pc.equal(t["status_code"], 200))).num_rows
            for t in Lake(load_settings().lake_root).day_tables(day, ["kind", "status_code"])
        )

    def wait_sealed(self, day: str, expected: int, clock: DayClock) -> None:
        """Until the lake holds `expected` answered requests of `day` (the clock stands at the day's last instant
        meanwhile, so what is sealed late is still that day's). Gives up with a warning after a minute."""
        deadline = time.time() + 60.0 + 4 * self.o.segment_seconds
        sealed = self.sealed_requests(day)
        while sealed < expected and time.time() < deadline:
            self.wait_until(time.time() + min(1.0, self.o.segment_seconds), clock)
            sealed = self.sealed_requests(day)
        if sealed < expected:
            self.echo(f"  warning: {sealed} of the day's {expected} answered requests are sealed in the lake")

    def wait_until(self, real_time: float, clock: DayClock) -> None:
        """Sleep until `real_time`, checking the children every second and ticking release control when due."""
        while True:
            self.sup.check_alive()
            left = real_time - time.time()
            if left <= 0:
                return
            self.tick()
            time.sleep(min(1.0, left))

    def tick(self, force: bool = False) -> None:
        """--no-dagster-ui: one release-control evaluation (at most every few seconds unless forced)."""
        if self.o.dagster_ui:
            return
        every = 60.0 if self.accelerated_tick is None else float(self.accelerated_tick)
        if not force and time.monotonic() - self.last_tick < every:
            return
        self.last_tick = time.monotonic()
        self.state.release_state, acted = release_tick_once(self.home, self.state.release_state)
        self.state.save(self.home)
        if acted:
            self.echo(f"  release: {acted}")
        adapters = reconcile_adapters_once(self.home, f"http://127.0.0.1:{self.o.student_port}/v1")
        if adapters:
            self.echo(f"  adapters: {adapters}")

    def night(self, day: str, totals: Totals) -> None:
        self.echo(f"night of {day}: materialising the nightly job (log {self.logs / f'night-{day}.log'}) ...")
        result = run_night(
            day,
            self.base_env(),
            self.logs,
            run_config=night_run_config(self.o.train_epochs, self.o.train_min_steps, self.o.train_threads),
        )
        self.state.days_done = sorted({*self.state.days_done, day})
        if self.state.open_day == day:
            self.state.open_day = None
        self.state.bursts_done.pop(day, None)
        self.state.save(self.home)
        self.tick(force=True)  # --no-dagster-ui: admit the new certificate now
        report = self.day_report(day, totals, result)
        self.reports.append(report)
        self.print_day(report)
        if self.emit is not None:
            self.emit(report)

    # reporting --------------------------------------------------------------------------------------------------
    def day_report(self, day: str, totals: Totals, result) -> dict[str, Any]:
        receipt = self.layout.receipt_envelope(day)
        version = result.meta("lora_adapter", "version") or result.meta("evaluation_certificate", "version")
        bom = self.layout.bom(str(version)) if version else None
        certified = result.meta("evaluation_certificate", "certified_tasks")
        sealed = result.meta("daily_receipt", "dagster/row_count")
        # A resumed day's traffic was sent by the previous run: count what its receipt signed.
        resumed = not totals.sent and bool(sealed)
        if resumed:
            student = int(result.meta("daily_receipt", "student_requests") or 0)
            totals.sent = totals.ok = int(sealed)
            totals.served_by.update({"student": student, "teacher": int(sealed) - student})
        return {
            "day": day,
            "requests": totals.sent,
            "day_seconds": totals.day_seconds,
            "past_day_end_seconds": totals.past_day_end,
            "ok": totals.ok,
            "errors": totals.sent - totals.ok,
            "error_samples": totals.error_samples,
            "accuracy": (totals.correct / totals.ok) if totals.ok and not resumed else None,
            "served_by": dict(totals.served_by),
            "student_share": totals.student_share,
            "student_share_per_task": {
                t: c["student"] / c["ok"]
                for t, c in sorted(totals.by_task.items())
                if c["ok"] and not resumed
            },
            "by_task": {t: dict(c) for t, c in sorted(totals.by_task.items())},
            "night": {
                "exit_code": result.exit_code,
                "seconds": result.summary.get("seconds"),
                "load_seconds": result.summary.get("load_seconds"),
                "wall_seconds": result.wall_seconds,
                "steps": result.summary.get("steps", []),
                "run_id": result.summary.get("run_id"),
                "materialised": result.materialised,
                "failures": result.summary.get("failures", {}),
                "log": str(result.log_path),
            },
            "numbers": {
                "new_examples": result.meta("golden_split", "new_keys"),
                "golden": result.meta("golden_split", "golden_size"),
                "train_rows": result.meta("training_set", "dagster/row_count"),
                "train_steps": result.meta("lora_adapter", "steps"),
                "train_seconds": result.meta("lora_adapter", "train_seconds"),
                "train_reused": result.meta("lora_adapter", "reused"),
                "train_start": result.meta("lora_adapter", "start_reason")
                or result.meta("lora_adapter", "start"),
                "train_stopped": result.meta("lora_adapter", "stopped"),
            },
            "certificate": {
                task: {
                    "n": result.meta("evaluation_certificate", f"{task}/n"),
                    "precision": result.meta("evaluation_certificate", f"{task}/precision"),
                    "lower_bound": result.meta("evaluation_certificate", f"{task}/lower_bound"),
                }
                for task in TASKS
                if result.meta("evaluation_certificate", f"{task}/n") is not None
            },
            "certify_target": result.meta("evaluation_certificate", "target"),
            "adapter_version": version,
            "certified_tasks": []
            if certified in (None, "none")
            else [t.strip() for t in certified.split(",")],
            "saved_usd": result.meta("daily_receipt", "saved_usd"),
            "receipt": str(receipt) if receipt.exists() else None,
            "bom": str(bom) if bom is not None and bom.exists() else None,
            "stages": serving_stages(self.home, TASKS),
        }

    def print_day(self, r: dict[str, Any]) -> None:
        acc = "-" if r["accuracy"] is None else f"{r['accuracy']:.1%}"
        per_task = r["student_share_per_task"]
        shares = f" ({', '.join(f'{t} {v:.1%}' for t, v in per_task.items())})" if len(per_task) > 1 else ""
        self.echo(
            f"day {r['day']}: {r['requests']} requests ({r['errors']} errors), "
            f"student served {r['student_share']:.1%}{shares}, accuracy {acc}"
        )
        if r["day_seconds"] is not None:
            waited = r["past_day_end_seconds"]
            self.echo(
                f"  day: {r['day_seconds']:.0f} s"
                + (
                    f" (the clock stood at the day's end {waited:.0f} s for its traffic to be sealed)"
                    if waited
                    else ""
                )
            )
        for sample in r["error_samples"]:
            self.echo(f"  error: {sample}")
        night = r["night"]
        self.echo(
            f"  night: {night['wall_seconds']} s ({night['seconds']} s running the job, "
            f"{night['load_seconds']} s loading the code location, the rest starting Python and Dagster)"
        )
        if night["steps"]:
            self.echo(f"  steps: {describe_steps(night['steps'])}")
        else:
            self.echo(f"  materialised: {', '.join(night['materialised']) or 'nothing'}")
        num = r["numbers"]
        if num["new_examples"] is not None:
            self.echo(
                f"  data: {num['new_examples']} new examples; golden set {num['golden']} rows to date; "
                f"training set {num['train_rows']} rows"
            )
        if num["train_steps"] is not None:
            how = "reused (same data, config and base)" if num["train_reused"] else "trained"
            line = f"  training: {how}, {num['train_steps']} steps, {float(num['train_seconds']):.0f} s"
            if not num["train_reused"] and num.get("train_start"):
                line += f"; start: {num['train_start']}"
            if not num["train_reused"] and num.get("train_stopped"):
                line += f"; stopped: {num['train_stopped']}"
            self.echo(line)
        for step, msg in night["failures"].items():
            if step == "evaluation_certificate" and r["certificate"] and not r["certified_tasks"]:
                continue  # a not-certified night is an outcome, said below in numbers (older runs failed here)
            self.echo(f"  night step {step} did not complete: {msg}")
        if r["adapter_version"]:
            certified = ", ".join(r["certified_tasks"]) or "none yet: no BOM, nothing released tonight"
            self.echo(f"  adapter {r['adapter_version']}: certified for {certified}")
            target = r["certify_target"]
            for task, c in r["certificate"].items():
                verdict = ">=" if target is not None and c["lower_bound"] >= target else "<"
                self.echo(
                    f"    {task}: {round(c['precision'] * c['n'])}/{c['n']} golden rows right "
                    f"({c['precision']:.1%}), lower bound {c['lower_bound']:.4f} {verdict} target {target}"
                )
        self.echo(f"  receipt: {r['receipt'] or 'none (see ' + night['log'] + ')'}")
        if r["saved_usd"] is not None:
            self.echo(f"  saved against all-teacher: ${r['saved_usd']:.6f}")
        if r["bom"]:
            self.echo(f"  bom: {r['bom']}")
        self.echo("  stages: " + ", ".join(f"{t}={describe_stage(s)}" for t, s in r["stages"].items()))

    def print_verify(self) -> None:
        receipts = [self.layout.receipt_envelope(d) for d in self.layout.receipt_days()]
        boms = self.layout.bom_files()
        if not receipts and not boms:
            return
        pub = self.home / "keys" / "signing.pub"
        self.echo("\nverify the evidence offline (public key only):")
        if receipts:
            last = receipts[-1]
            prev = f" --prev {receipts[-2]}" if len(receipts) > 1 else ""
            self.echo(f"  ratchet verify receipt {last} --key {pub}{prev}")
        for bom in boms[-1:]:
            version = bom.parent.name
            adapter = self.layout.adapter_dir(version)
            notice = self.layout.bom_notice(version)
            extra = f" --notice {notice}" if notice.exists() else ""
            extra += f" --adapter-dir {adapter}" if adapter.exists() else ""
            self.echo(f"  ratchet verify bom {bom} --key {pub}{extra}")

    def print_costs(self) -> None:
        """The last lines: each day's receipt beside its cost report (``ratchet_cli.demo.costs``)."""
        days = self.layout.receipt_days()
        if days:
            for line in side_by_side(self.home, days):
                self.echo(line)
