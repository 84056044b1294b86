"""``ratchet sim``: days of traffic, nights and releases in one process, with the real Ratchet logic.

Per simulated day d (1-based; workload day index d - 1):

1. traffic: ``Workload.generate(R, seed, day=d-1, drift_day=D-1)``; each request is routed by the current release
   manifest with the gateway's own decision function (``ratchet_core.routing.route``: stages, canary hash,
   audit hash) and the confidence cascade (the student answer is kept when confidence >= threshold); the teacher is
   the demo teacher's brain (``ratchet_core.workloads.solve``). Ledger rows (``ratchet_core.schema.request_row``
   and ``pair_row``): one ``request`` row per request, one ``pair`` row per audit (teacher re-asked) or shadow
   answer, written as the day's sealed segment under ``<home>/lake``.
2. release control during the day: every ``tick_requests`` requests a sensor tick runs the release sensor's own
   decision, ``ratchet_assets.release.tick.decide_tick``, on the in-memory manifest, the night's certified
   candidates and the pair rows written since the last tick (``PairRow``, in order), and applies its plan with the
   same pure helpers the sensor uses (``tick.admit``, ``tick.apply_decision``, ``tick.admission_statuses`` /
   ``tick.decision_statuses`` into an in-memory versions registry, the manifests kept as history for rollbacks).
3. the night, with the asset logic itself: ``night.traffic.consolidate_traffic`` -> ``night.examples
   .build_examples`` -> ``night.split.split_golden`` -> ``night.training_set.build_training_set``; the student is
   trained on that ``train.jsonl`` (``sim.student``), answers the golden set, and
   ``ratchet_stats.certificate.build_certificate`` computes the Clopper-Pearson bound, the LTT threshold and McNemar
   against the live version; tasks whose bound reaches the target become candidates (as the versions registry does).

Who answers off the request path is the gateway's own decision too (``ratchet_core.routing.pairs``): the canary's
rest is shadowed by the canary version, and a request served by the previous live version that is audited is also
answered by the candidate and compared with the teacher's audit answer, so evidence is always against the teacher.
A shadow pair records the shadowed version's own threshold (``Route.shadow_threshold``), so ``PairRow.error``
ignores answers the cascade would have sent to the teacher. Everything is deterministic in the arguments: the same seed gives byte-identical output.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from ratchet_assets.release.decision import LADDER, Decision, ReleaseRule, Track
from ratchet_assets.release.evidence import PairRow
from ratchet_assets.release.tick import (
    Admission,
    Candidate,
    StatusChange,
    TickPlan,
    admission_statuses,
    admit,
    apply_decision,
    decide_tick,
    decision_statuses,
    healthy_versions,
)
from ratchet_assets.sim.student import CorruptedStudent, FastStudent, Student
from ratchet_core import manifest as mf
from ratchet_core.lake import segment_relpath
from ratchet_core.layout import ArtifactLayout
from ratchet_core.redact import redact_messages, redact_text
from ratchet_core.routing import SafetyState, pairs, route
from ratchet_core.schema import pair_row, request_row
from ratchet_core.workloads import compare, get_workload, solve
from ratchet_stats.canonical import canonical_json, sha256_hex

# The gateway's default student price (ratchet_gateway.app.DEFAULT_STUDENT_PRICES): $0.02 / 1M input and
# $0.06 / 1M output tokens; restated so the simulator does not import the web app.
STUDENT_PRICE_IN, STUDENT_PRICE_OUT = 2e-8, 6e-8
REPLICA = "sim"
_NO_SAFETY = SafetyState()  # no local safety switch: the manifest alone decides


class SimError(ValueError):
    """The simulation cannot run with these arguments; the message says what to change."""


@dataclass(frozen=True)
class SimConfig:
    """Arguments of one simulation (days are 1-based; ``drift_day`` is the first day with drifted traffic)."""

    days: int = 7
    requests: int = 600
    workload: str = "tickets"
    drift_day: int | None = None
    bad_deploy_version: int | None = None  # the V-th deployed version serves 30% wrong answers
    seed: int = 0
    student: str = "fast"
    audit_rate: float = 0.05
    start_day: str = "2026-01-05"
    tick_requests: int = 20
    target: float = 0.95
    delta: float = 0.05
    golden_share: float = 0.2
    window_days: int = 7
    teacher_model: str = "gpt-4o"
    corrupt_share: float = 0.3

    def check(self) -> None:
        if self.days < 1:
            raise SimError(f"--days must be at least 1 (got {self.days})")
        if self.requests < 1:
            raise SimError(f"--requests must be at least 1 (got {self.requests})")
        if self.student not in ("fast", "lora"):
            raise SimError(f"--student is fast or lora (got {self.student!r})")
        if not 0.0 <= self.audit_rate <= 1.0:
            raise SimError(f"--audit-rate must be between 0 and 1, e.g. 0.05 (got {self.audit_rate})")
        if self.drift_day is not None and self.drift_day < 1:
            raise SimError(f"--drift-day is a day number from 1 (got {self.drift_day})")
        if self.bad_deploy_version is not None and self.bad_deploy_version < 1:
            raise SimError(f"--bad-deploy-version counts deployments from 1 (got {self.bad_deploy_version})")
        if self.tick_requests < 1:
            raise SimError(f"tick_requests must be at least 1 (got {self.tick_requests})")
        try:
            get_workload(self.workload)
        except KeyError as exc:
            raise SimError(str(exc.args[0])) from None
        teacher_prices(self.teacher_model)


@lru_cache(maxsize=8)
def teacher_prices(model: str) -> tuple[float, float]:
    """USD per (input, output) token of `model` from litellm's bundled price map (``ratchet_core.pricing``)."""
    from ratchet_core.pricing import known_prices

    try:
        p = known_prices(model)
    except RuntimeError as exc:  # litellm is not installed
        raise SimError(str(exc)) from None
    if p is None:
        raise SimError(f"litellm's price map has no price for {model!r}; pass --teacher-model, e.g. gpt-4o")
    return p.input_per_token, p.output_per_token


def tokens_of(text: str) -> int:
    """Token count estimate: one token per 4 UTF-8 bytes, at least 1 (OpenAI's rule of thumb)."""
    return max(1, math.ceil(len(text.encode("utf-8")) / 4))


def _cj(value: Any) -> str:
    return canonical_json(value).decode("utf-8")


@dataclass
class Deployment:
    version: str
    task: str
    number: int
    day: int
    corrupted: bool
    max_percent: float = 0.0
    stage: str = "shadow"
    pair_rows: int = 0  # pair rows about this version from its deployment to its rollback or the end
    rolled_back_day: int | None = None
    audits_to_rollback: int | None = None  # evidence rows its rollback e-process had seen when it fired
    live_day: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class _State:
    manifest: mf.Manifest
    rule: ReleaseRule
    tracks: dict[tuple[str, str], Track] = field(default_factory=dict)
    pending: list[PairRow] = field(default_factory=list)  # evidence written since the last tick, in order
    candidates: list[Candidate] = field(default_factory=list)  # certified by a night, not admitted yet
    statuses: dict[tuple[str, str], str] = field(default_factory=dict)  # the versions registry: status
    history: list[mf.Manifest] = field(default_factory=list)  # every manifest "published", oldest first
    models: dict[str, Any] = field(default_factory=dict)
    deployments: list[Deployment] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


class Simulation:
    """One run; ``run()`` returns ``{"config", "days", "summary"}`` (JSON-ready)."""

    def __init__(self, config: SimConfig, home: Path, on_day: Callable[[dict[str, Any]], None] | None = None):
        config.check()
        self.cfg = config
        self.home = Path(home)
        self.lake = self.home / "lake"
        self.artifacts = self.home / "artifacts"
        self.layout = ArtifactLayout(self.artifacts)
        self.on_day = on_day
        self.prices = teacher_prices(config.teacher_model)
        manifest = mf.Manifest.default()
        manifest.flags.audit_rate = config.audit_rate
        self.s = _State(manifest=manifest, rule=ReleaseRule(target=config.target))
        self.workload = get_workload(config.workload)
        self.pairs_total = {"audit": 0, "shadow": 0}
        self.version_count = 0

    # one request -----------------------------------------------------------------------------------------
    def _student(self, version: str) -> Student:
        return self.s.models[version]

    def _ask_student(self, version: str, rid: str, ex: Any) -> tuple[dict[str, Any], float]:
        model = self._student(version)
        if isinstance(model, CorruptedStudent):
            return model.answer_for(rid, ex.task, ex.messages, ex.tools, ex.response_format)
        return model.answer(ex.task, ex.messages, ex.tools, ex.response_format)

    def _cost(self, prices: tuple[float, float], p: int, c: int) -> float:
        return p * prices[0] + c * prices[1]

    def _request(self, day: int, date_s: str, i: int, ex: Any, seq: list[int]) -> tuple[list[dict], dict]:
        cfg, s = self.cfg, self.s
        rid = "sim-" + sha256_hex(f"{cfg.seed}:{day}:{i}".encode())[:24]
        ts = datetime.fromisoformat(date_s).replace(tzinfo=UTC) + timedelta(
            seconds=(i + 0.5) * 86_000 / cfg.requests
        )
        task = ex.task
        r = route(s.manifest, _NO_SAFETY, task, rid)
        teacher_msg = solve(task, ex.messages, ex.tools, ex.response_format)
        messages_text = _cj(redact_messages(ex.messages))
        p = tokens_of(messages_text)
        served_by, answer, confidence, threshold, version = "teacher", teacher_msg, None, None, ""
        student_cost = 0.0
        if r.student_version:
            msg, confidence = self._ask_student(r.student_version, rid, ex)
            threshold, version = r.threshold, r.student_version
            student_cost = self._cost((STUDENT_PRICE_IN, STUDENT_PRICE_OUT), p, tokens_of(_cj(msg)))
            if threshold is None or confidence >= threshold:
                served_by, answer = "student", msg
        c = tokens_of(_cj(answer))
        teacher_cost = self._cost(self.prices, p, c)
        actual = student_cost if served_by == "student" else teacher_cost + student_cost
        tools = {"tools": ex.tools, "tool_choice": ex.tool_choice} if ex.tools else None
        base = dict(
            request_id=rid,
            ts=ts,
            day=date_s,
            replica=REPLICA,
            client="sim",
            task=task,
            model_requested="ratchet",
            stage=r.stage,
            messages=messages_text,
            tools=_cj(tools) if tools else "",
            response_format=_cj(ex.response_format) if ex.response_format else "",
            status_code=200,
        )
        off_path = pairs(r, served_by)
        audit, shadow_version, role = off_path.audit, off_path.shadow_version, off_path.role
        seq[0] += 1
        rows = [
            request_row(
                **base,
                seq=seq[0],
                version=version or r.version,
                served_by=served_by,
                answer=redact_text(answer["content"]) if answer.get("content") else "",
                tool_calls=_cj(answer["tool_calls"]) if answer.get("tool_calls") else "",
                finish_reason="tool_calls" if answer.get("tool_calls") else "stop",
                prompt_tokens=p,
                completion_tokens=c,
                total_tokens=p + c,
                teacher_cost_usd=teacher_cost,
                actual_cost_usd=actual,
                confidence=confidence,
                threshold=threshold,
                pair_role=role,
            )
        ]
        pair_costs = 0.0
        if audit:
            outcome = "agree" if compare(task, teacher_msg, answer) else "disagree"
            seq[0] += 1
            rows.append(
                self._pair_row(base, seq[0], "audit", version, teacher_msg, outcome, None, threshold, p)
            )
            s.pending.append(PairRow("", 0, version, task, "audit", outcome, None, None))
            pair_costs += teacher_cost
        if shadow_version:
            msg, conf = self._ask_student(shadow_version, rid, ex)
            outcome = "agree" if compare(task, teacher_msg, msg) else "disagree"
            thr = r.shadow_threshold
            seq[0] += 1
            rows.append(self._pair_row(base, seq[0], "shadow", shadow_version, msg, outcome, conf, thr, p))
            s.pending.append(PairRow("", 0, shadow_version, task, "shadow", outcome, conf, thr))
            pair_costs += self._cost((STUDENT_PRICE_IN, STUDENT_PRICE_OUT), p, tokens_of(_cj(msg)))
        for row in rows[1:]:
            dep = self._deployment(row["version"], task)
            if dep is not None and dep.rolled_back_day is None:
                dep.pair_rows += 1
        correct = compare(task, ex.expected, answer)
        stats = {
            "served_by": served_by,
            "correct": correct,
            "teacher_cost": teacher_cost,
            "actual": actual + pair_costs,
            "audit": int(audit),
            "shadow": int(bool(shadow_version)),
        }
        return rows, stats

    def _pair_row(
        self,
        base: dict,
        seq: int,
        role: str,
        version: str,
        msg: dict,
        outcome: str,
        confidence: float | None,
        threshold: float | None,
        p: int,
    ) -> dict:
        c = tokens_of(_cj(msg))
        teacher_cost = self._cost(self.prices, p, c)
        student_cost = self._cost((STUDENT_PRICE_IN, STUDENT_PRICE_OUT), p, c)
        return pair_row(
            **base,
            seq=seq,
            version=version,
            served_by="student" if role == "shadow" else "teacher",
            answer=redact_text(msg["content"]) if msg.get("content") else "",
            tool_calls=_cj(msg["tool_calls"]) if msg.get("tool_calls") else "",
            finish_reason="tool_calls" if msg.get("tool_calls") else "stop",
            prompt_tokens=p,
            completion_tokens=c,
            total_tokens=p + c,
            teacher_cost_usd=teacher_cost,
            actual_cost_usd=student_cost if role == "shadow" else teacher_cost,
            confidence=confidence,
            threshold=threshold,
            pair_role=role,
            pair_outcome=outcome,
        )

    # release control ---------------------------------------------------------------------------------------
    def _deployment(self, version: str, task: str) -> Deployment | None:
        for dep in self.s.deployments:
            if dep.version == version and dep.task == task:
                return dep
        return None

    def _publish(self, changes: list[StatusChange]) -> None:
        """The in-memory equivalent of a signed publish: next sequence, kept in the history, registry updated."""
        s = self.s
        s.manifest.sequence += 1
        s.history.append(s.manifest.model_copy(deep=True))
        for c in changes:
            s.statuses[(c.version, c.task)] = c.status

    def _admitted(self, adm: Admission, day: int, i: int) -> None:
        s = self.s
        admit(s.manifest, adm)
        self._publish(admission_statuses(adm))
        gone = {adm.version, *adm.retire}
        s.candidates = [c for c in s.candidates if not (c.task == adm.task and c.version in gone)]
        number = len(s.deployments) + 1
        corrupted = number == self.cfg.bad_deploy_version
        if corrupted and not isinstance(s.models[adm.version], CorruptedStudent):
            s.models[adm.version] = CorruptedStudent(s.models[adm.version], self.cfg.corrupt_share)
        s.deployments.append(Deployment(adm.version, adm.task, number, day, corrupted))
        s.events.append(
            {
                "day": day,
                "request": i,
                "action": "admit",
                "version": adm.version,
                "task": adm.task,
                "to": "shadow",
            }
        )

    def _tick(self, day: int, i: int) -> None:
        """One sensor evaluation: ``decide_tick`` on what is in memory, then apply its plan."""
        s = self.s
        pending = [dataclasses.replace(r, segment="pending", index=k) for k, r in enumerate(s.pending)]
        plan = decide_tick(s.manifest, s.candidates, s.tracks, [("pending", pending)], s.rule)
        for adm in plan.admissions:
            self._admitted(adm, day, i)
        s.tracks = plan.tracks
        if plan.stop is not None:
            s.pending = s.pending[plan.stop.index + 1 :]
        elif plan.read:
            s.pending = []
        if plan.decision is not None:
            self._apply(plan, plan.decision, day, i)

    def _apply(self, plan: TickPlan, d: Decision, day: int, i: int) -> None:
        s = self.s
        dep = self._deployment(d.version, d.task)
        track = plan.tracks[(d.version, d.task)]
        statuses = {v: st for (v, t), st in s.statuses.items() if t == d.task}
        apply_decision(s.manifest, d, s.history, healthy_versions(statuses, plan.tracks, d.task))
        self._publish(decision_statuses(d, s.manifest.task(d.task)))
        s.tracks = plan.tracks_after(s.rule)
        if d.action == "rollback":
            if dep is not None:
                dep.rolled_back_day, dep.stage = day, "rolled_back"
                dep.audits_to_rollback = track.rollback.n
        else:
            assert d.to_step is not None
            if dep is not None:
                dep.max_percent = max(dep.max_percent, LADDER[d.to_step].percent)
                dep.stage = LADDER[d.to_step].label
                if d.to_step == len(LADDER) - 1 and dep.live_day is None:
                    dep.live_day = day
        s.events.append(
            {
                "day": day,
                "request": i,
                "action": d.action,
                "version": d.version,
                "task": d.task,
                "to": d.target_label,
                "message": d.message,
            }
        )

    # the night ---------------------------------------------------------------------------------------------
    def _night(self, day: int, date_s: str) -> dict[str, Any]:
        from ratchet_assets.night.evaluate import Answer, load_golden, task_outcomes
        from ratchet_assets.night.examples import build_examples
        from ratchet_assets.night.split import split_golden
        from ratchet_assets.night.traffic import consolidate_traffic
        from ratchet_assets.night.training_set import build_training_set
        from ratchet_stats.certificate import build_certificate

        cfg, s = self.cfg, self.s
        traffic = consolidate_traffic(self.lake, self.artifacts, date_s)
        examples = build_examples(self.artifacts, date_s)
        split = split_golden(self.artifacts, date_s, share=cfg.golden_share)
        train = build_training_set(self.artifacts, date_s, window_days=cfg.window_days)
        student = self._train(Path(train.path), day)
        self.version_count += 1
        version = f"v{self.version_count}-{student.digest[:8]}"
        s.models[version] = student
        golden = load_golden(self.artifacts, date_s)
        answers = [Answer(*student.answer(g.task, g.messages, g.tools, g.response_format)) for g in golden]
        baselines = {}
        for task in sorted({g.task for g in golden}):
            rel = s.manifest.task(task)
            if rel.stage == "live" and rel.version in s.models:
                live = s.models[rel.version]
                live = live.inner if isinstance(live, CorruptedStudent) else live
                baselines[task] = (
                    rel.version,
                    [
                        Answer(*live.answer(g.task, g.messages, g.tools, g.response_format))
                        for g in golden
                        if g.task == task
                    ],
                )
        outcomes = task_outcomes(golden, answers, baselines)
        predicate = build_certificate(
            version=version,
            base={"name": f"sim-{cfg.student}-student"},
            adapter_sha256=student.digest,
            golden_root=split.golden_root,
            golden_size=split.golden_size,
            target=cfg.target,
            delta=cfg.delta,
            tasks=outcomes,
            day=date_s,
        )
        cert_file = self.layout.certificate_predicate(version)
        cert_file.parent.mkdir(parents=True, exist_ok=True)
        # Unsigned: the simulator holds no signing key; the numbers are the certificate's own.
        cert_file.write_bytes(canonical_json(predicate))
        tasks = {}
        for task, sec in sorted(predicate["tasks"].items()):
            threshold = sec["ltt"]["threshold"]
            tasks[task] = {
                "n": sec["n"],
                "correct": sec["correct"],
                "lower_bound": round(sec["lower_bound"], 6),
                "certified": sec["certified"],
                "threshold": threshold,
                "mcnemar_p": round(sec["mcnemar"]["p_value"], 6) if sec["mcnemar"] else None,
            }
            if sec["certified"]:  # what the versions registry does with a signed certificate
                s.candidates.append(Candidate(version, task, threshold, sec["lower_bound"], cert_file.name))
        return {
            "version": version,
            "traffic_rows": traffic.rows,
            "examples": examples.examples,
            "golden_size": split.golden_size,
            "golden_root": split.golden_root,
            "train_rows": train.rows,
            "train_root": train.rows_root,
            "certificate": tasks,
        }

    def _train(self, train_jsonl: Path, day: int) -> Student:
        if self.cfg.student == "fast":
            return FastStudent.train(train_jsonl)
        from ratchet_assets.sim.student import LoraStudent
        from ratchet_core.student_model import ensure_demo_base

        base = ensure_demo_base(self.home / "models" / "demo-base")
        return LoraStudent.train(
            base, train_jsonl, self.layout.adapter_dir(f"night-{day}"), seed=self.cfg.seed
        )

    # the run -----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from ratchet_assets.night.fixtures import write_segment

        cfg, s = self.cfg, self.s
        records = []
        cum_audits = 0
        totals = {"teacher": 0.0, "actual": 0.0, "requests": 0, "student": 0, "correct": 0}
        for day in range(1, cfg.days + 1):
            date_s = (date.fromisoformat(cfg.start_day) + timedelta(days=day - 1)).isoformat()
            drift = None if cfg.drift_day is None else cfg.drift_day - 1
            examples = self.workload.generate(cfg.requests, seed=cfg.seed, day=day - 1, drift_day=drift)
            first_event = len(s.events)
            seq = [0]
            rows: list[dict] = []
            agg = {
                "student": 0,
                "correct": 0,
                "student_correct": 0,
                "teacher": 0.0,
                "actual": 0.0,
                "audit": 0,
                "shadow": 0,
            }
            by_task: dict[str, list[int]] = {}  # task -> [requests, served by the student]
            for i, ex in enumerate(examples):
                if i % cfg.tick_requests == 0:
                    self._tick(day, i)
                r, st = self._request(day, date_s, i, ex, seq)
                rows.extend(r)
                student = st["served_by"] == "student"
                agg["student"] += student
                per_task = by_task.setdefault(ex.task, [0, 0])
                per_task[0] += 1
                per_task[1] += student
                agg["correct"] += st["correct"]
                agg["student_correct"] += student and st["correct"]
                agg["teacher"] += st["teacher_cost"]
                agg["actual"] += st["actual"]
                agg["audit"] += st["audit"]
                agg["shadow"] += st["shadow"]
            self._tick(day, cfg.requests)
            write_segment(self.lake / segment_relpath(date_s, REPLICA, 1), rows)
            stages = {
                task: {
                    "stage": rel.stage if rel.stage != "canary" else f"canary-{rel.canary_percent:g}",
                    "version": rel.version,
                    "threshold": rel.threshold,
                    "previous_live": rel.previous_live,
                }
                for task, rel in sorted(s.manifest.tasks.items())
            }
            for task in self.workload.tasks:
                stages.setdefault(
                    task, {"stage": "teacher", "version": "", "threshold": None, "previous_live": None}
                )
            night = self._night(day, date_s)
            n = cfg.requests
            cum_audits += agg["audit"] + agg["shadow"]
            record = {
                "day": day,
                "date": date_s,
                "requests": n,
                "student_share": round(agg["student"] / n, 6),
                "student_share_per_task": {t: round(c[1] / c[0], 6) for t, c in sorted(by_task.items())},
                "served_precision": round(agg["correct"] / n, 6),
                "student_precision": round(agg["student_correct"] / agg["student"], 6)
                if agg["student"]
                else None,
                "stages": stages,
                "cost": {
                    "all_teacher_usd": round(agg["teacher"], 6),
                    "actual_usd": round(agg["actual"], 6),
                    "ratio": round(agg["actual"] / agg["teacher"], 6) if agg["teacher"] else None,
                },
                "audits": {
                    "audit_pairs": agg["audit"],
                    "shadow_pairs": agg["shadow"],
                    "cumulative": cum_audits,
                },
                "events": s.events[first_event:],
                "night": night,
            }
            records.append(record)
            totals["teacher"] += agg["teacher"]
            totals["actual"] += agg["actual"]
            totals["requests"] += n
            totals["student"] += agg["student"]
            totals["correct"] += agg["correct"]
            if self.on_day is not None:
                self.on_day(record)
        first_90 = next((r["day"] for r in records if r["student_share"] >= 0.9), None)
        summary = {
            "requests": totals["requests"],
            "student_share": round(totals["student"] / totals["requests"], 6),
            "served_precision": round(totals["correct"] / totals["requests"], 6),
            "all_teacher_usd": round(totals["teacher"], 6),
            "actual_usd": round(totals["actual"], 6),
            "saved_usd": round(totals["teacher"] - totals["actual"], 6),
            "cost_ratio": round(totals["actual"] / totals["teacher"], 6) if totals["teacher"] else None,
            "first_day_student_share_90": first_90,
            "deployments": [d.to_dict() for d in s.deployments],
            "manifest_sequence": s.manifest.sequence,
            "teacher_price_per_token": {
                "model": cfg.teacher_model,
                "input": self.prices[0],
                "output": self.prices[1],
            },
            "student_price_per_token": {"input": STUDENT_PRICE_IN, "output": STUDENT_PRICE_OUT},
        }
        return {"config": dataclasses.asdict(cfg), "days": records, "summary": summary}


def run_sim(
    config: SimConfig, home: str | Path, on_day: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run a simulation under `home` (which must not hold an earlier run); return the JSON-ready result."""
    home = Path(home)
    if (home / "lake" / "traffic").exists() or ArtifactLayout(home / "artifacts").golden_registry().exists():
        raise SimError(
            f"{home} already holds a simulation: pass an empty --home or leave it out (a temp folder)"
        )
    return Simulation(config, home, on_day).run()


def to_json(result: dict[str, Any]) -> str:
    """The run as JSON text (sorted keys): byte-identical for the same arguments."""
    return json.dumps(result, sort_keys=True, indent=1, allow_nan=False) + "\n"
