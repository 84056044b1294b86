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
   against the live version; tasks whose bound reaches the target become candidates (as the versions registry does),
   with the numbers the admission rules read (``ratchet_assets.release.admission.certificate_numbers``). With
   ``receipts`` the night also seals the day's receipt with its own code (``night.receipts.build_receipt``, signed
   by a key derived from the seed, its public half in ``<home>/sim-receipt-key.pub``), shown beside the true
   all-teacher cost the simulator knows (every request's teacher answer, reasoning tokens included).

The rules it compares are the task policy's (``SimConfig.task_policy``, signed into the simulated manifest for every
task of the workload, as ``ratchet admin task set`` signs them), read by the same functions as the sensor's:

- ``--release sequential`` (default): betting e-processes; promotion when the stage's e-process rejects
  "precision <= target" at alpha, rollback when the whole-life one (or a drift restart) rejects "precision >=
  floor"; anytime-valid, so the chance of ever rolling back a version whose precision is >= floor is <=
  rollback_alpha + drift_alpha however often it is looked at (Ramdas et al. 2023, Statistical Science 38(4);
  ``ratchet_assets.release.decision``).
- ``--release wilson``: the Wilson score interval over the stage's own audited answers (Wilson 1927, JASA 22(158)),
  checked after every answer once the stage has 30: promote when its lower bound exceeds the target, roll back
  when its upper bound is below the floor. Each look is a level-alpha test of a fixed sample, so looking after
  every answer spends alpha again and again (Armitage, McPherson & Rowe 1969, JRSS-A 132(2)).
- ``--promote-evidence e-value|bound``: promote only on the e-value, or only on the Wilson bound, whatever rolls
  back.
- ``--calibration ltt`` (default): the Learn-then-Test threshold, P(served precision < target) <= delta
  (Angelopoulos et al. 2021, arXiv:2110.01052); ``point``: the loosest grid threshold whose observed golden
  precision reaches the target, no error control (``ratchet_stats.ltt.point_threshold``).
- ``--cert-target/--cert-delta``: the Clopper-Pearson certificate's level (Clopper & Pearson 1934, Biometrika 26).
- ``--paired-gate``: exact one-sided McNemar of the candidate against the live version on the same golden rows at
  level delta; a significantly worse candidate is not admitted (McNemar 1947, Psychometrika 12(2)).
- ``--min-certified``: the least certified lower bound that may enter shadow.
- ``--canary-audit-rate``: the audit rate while a candidate is in shadow or canary (more evidence per day).

A newer certified version supersedes one still in shadow or canary (``tick.decide_tick``): the old one leaves the
manifest as ``superseded``, not rolled back.

Who answers off the request path is the gateway's own decision too (``ratchet_core.routing.pairs``): the canary's
rest is shadowed by the canary version, and a request served by the previous live version that is audited is also
answered by the candidate and compared with the teacher's audit answer, so evidence is always against the teacher;
every request the previous live version served is also mirrored (the candidate's answer compared with live's: a
``mirror`` pair row, free evidence for the carried bound of ``ratchet_assets.release.decision``; one answer of the
candidate serves an audited request's shadow and mirror rows and is paid once); where the candidate's answer differs
from live's and the request is in the targeted audit stream, the teacher judges it (a ``targeted`` row after the
mirror row, its price counted as evidence spend; each day's ``audits.targeted_pairs`` counts those calls).
A shadow pair records the shadowed version's own threshold (``Route.shadow_threshold``), so ``PairRow.error``
ignores answers the cascade would have sent to the teacher. Everything is deterministic in the arguments: the same seed gives byte-identical output.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from ratchet_assets.release.admission import Candidate, certificate_numbers
from ratchet_assets.release.content import content_digest, existing_version
from ratchet_assets.release.decision import LADDER, Decision, ReleaseRule, Track
from ratchet_assets.release.evidence import PairRow
from ratchet_assets.release.tick import (
    Admission,
    StatusChange,
    TickPlan,
    admission_statuses,
    admit,
    apply_decision,
    decide_tick,
    decision_statuses,
    healthy_versions,
    incumbent,
    supported_versions,
)
from ratchet_assets.sim.config import SimConfig, SimError, teacher_prices, tokens_of
from ratchet_assets.sim.student import CorruptedStudent, FastStudent, Student
from ratchet_core import manifest as mf
from ratchet_core.lake import segment_relpath
from ratchet_core.layout import ArtifactLayout
from ratchet_core.redact import redact_messages, redact_text
from ratchet_core.routing import SafetyState, differs, pairs, route
from ratchet_core.schema import pair_row, request_row
from ratchet_core.workloads import compare, get_workload, solve
from ratchet_stats.canonical import canonical_json, sha256_hex

# The gateway's default student price (ratchet_gateway.app.DEFAULT_STUDENT_PRICES): $0.02 / 1M input and
# $0.06 / 1M output tokens; restated so the simulator does not import the web app.
STUDENT_PRICE_IN, STUDENT_PRICE_OUT = 2e-8, 6e-8
REPLICA = "sim"
_NO_SAFETY = SafetyState()  # no local safety switch: the manifest alone decides


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
    pair_rows: int = (
        0  # audit and shadow rows about it from its deployment until it left (rollback, supersede)
    )
    mirror_rows: int = 0  # its mirror rows (compared with live's answer, not the teacher's) in that time
    targeted_rows: int = 0  # its targeted rows (the teacher judging where it differed from live) in that time
    rolled_back_day: int | None = None
    audits_to_rollback: int | None = None  # evidence rows its rollback e-process had seen when it fired
    live_day: int | None = None
    superseded_day: int | None = None
    superseded_by: str | None = None

    @property
    def gone(self) -> bool:
        return self.rolled_back_day is not None or self.superseded_day is not None

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
        self.workload = get_workload(config.workload)
        # The release options as the task policy production signs: the release functions read them from here.
        manifest.policies = {task: config.task_policy() for task in self.workload.tasks}
        # The sensor's global rule; each task's own target, delta and rules come from its policy (for_task).
        self.s = _State(manifest=manifest, rule=ReleaseRule())
        self.pairs_total = {"audit": 0, "shadow": 0}
        self.waits_seen: set[tuple[str, str]] = set()
        self.version_count = 0
        self.contents: list[tuple[str, str]] = []  # (version, content digest), oldest first
        # task -> (requests, the teacher's mean price of an answer) of the last day: the evidence budget's input
        self.traffic: dict[str, tuple[float, float]] = {}
        # task -> day -> [requests, served correctly, evidence spend]; version -> the night that minted it
        self.flywheel_days: dict[str, dict[int, list]] = {}
        self.minted_day: dict[str, int] = {}
        self.nights = 0
        # per night, oldest first: task -> whether its certificate certified it (the step budget's evidence)
        self.night_certified: list[dict[str, bool]] = []
        # --student lora: each version's training record, what a warm night reads to choose and check its parent
        # (night.warm_start), and the (version, task) pairs a night certified (the versions registry's rows)
        self.lora_records: dict[str, dict[str, Any]] = {}
        self.certified_pairs: list[tuple[str, str]] = []

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
        # What the teacher bills for this request: its answer plus its reasoning tokens (the true all-teacher cost).
        reasoning = cfg.reasoning_tokens(rid, "answer")
        teacher_c = tokens_of(_cj(teacher_msg)) + reasoning
        true_teacher_cost = self._cost(self.prices, p, teacher_c)
        served_by, answer, confidence, threshold, version = "teacher", teacher_msg, None, None, ""
        student_cost = 0.0
        if r.student_version:
            msg, confidence = self._ask_student(r.student_version, rid, ex)
            threshold, version = r.threshold, r.student_version
            student_cost = self._cost((STUDENT_PRICE_IN, STUDENT_PRICE_OUT), p, tokens_of(_cj(msg)))
            if threshold is None or confidence >= threshold:
                served_by, answer = "student", msg
        if served_by == "teacher":
            c, row_reasoning, teacher_cost = teacher_c, reasoning, true_teacher_cost
            actual = teacher_cost + student_cost
        else:  # the row's teacher cost is the gateway's estimate: the student's answer at the teacher's prices
            c, row_reasoning = tokens_of(_cj(answer)), 0
            teacher_cost, actual = self._cost(self.prices, p, c), student_cost
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
            prompt_tokens=p,
            teacher_prompt_tokens=p,  # the simulator counts every model's tokens alike (tokens_of)
        )
        off_path = pairs(r, served_by)
        audit, shadow_version, role = off_path.audit, off_path.shadow_version, off_path.role
        mirror = off_path.mirror
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
                completion_tokens=c,
                reasoning_tokens=row_reasoning,
                total_tokens=p + c,
                teacher_cost_usd=teacher_cost,
                actual_cost_usd=actual,
                confidence=confidence,
                threshold=threshold,
                pair_role=role,
            )
        ]
        pair_costs = 0.0
        audit_cost = 0.0  # the teacher's pay for this request's audit: evidence spend
        if audit:  # the teacher is asked again: another call, its own reasoning
            outcome = "agree" if compare(task, teacher_msg, answer) else "disagree"
            audit_reasoning = cfg.reasoning_tokens(rid, "audit")
            seq[0] += 1
            row = self._pair_row(
                base, seq[0], "audit", version, teacher_msg, outcome, None, threshold, audit_reasoning
            )
            rows.append(row)
            s.pending.append(PairRow("", 0, version, task, "audit", outcome, None, None))
            pair_costs += row["actual_cost_usd"]
            audit_cost = row["actual_cost_usd"]
        candidate = None  # the candidate's answer, asked once for its shadow and mirror pairs
        if shadow_version:
            candidate = self._ask_student(shadow_version, rid, ex)
            msg, conf = candidate
            outcome = "agree" if compare(task, teacher_msg, msg) else "disagree"
            thr = r.shadow_threshold
            seq[0] += 1
            row = self._pair_row(base, seq[0], "shadow", shadow_version, msg, outcome, conf, thr, 0)
            rows.append(row)
            s.pending.append(PairRow("", 0, shadow_version, task, "shadow", outcome, conf, thr))
            pair_costs += row["actual_cost_usd"]
        targeted = 0  # a new teacher call for the targeted stream (evidence spend)
        if mirror:  # free evidence: the candidate against the answer live served (routing.pairs)
            msg, conf = candidate or self._ask_student(mirror, rid, ex)
            outcome = "agree" if compare(task, answer, msg) else "disagree"
            thr = r.shadow_threshold
            mirrored = PairRow("", 0, mirror, task, "mirror", outcome, conf, thr, request_id=rid)
            seq[0] += 1
            row = self._pair_row(base, seq[0], "mirror", mirror, msg, outcome, conf, thr, 0)
            if candidate is not None:
                row["actual_cost_usd"] = 0.0  # the shadow row already bills this one answer of the candidate
            if candidate is None:  # one answer of the candidate serves both pairs: the student is paid once
                pair_costs += row["actual_cost_usd"]
            rows.append(row)
            s.pending.append(mirrored)
            if off_path.targeted and mirrored.disagrees:
                # the targeted stream: the teacher judges the candidate's answer where it differs from live's (its
                # audit answer when the request is audited, else a new call), a targeted row after the mirror row;
                # an answer its cascade would not keep is wrong for the bound whatever the teacher says: no call
                asked = audit or not differs("agree", conf, thr, "")
                judged = "agree" if compare(task, teacher_msg, msg) else "disagree"
                outcome = judged if asked else "error"
                reasoning = 0 if audit or not asked else cfg.reasoning_tokens(rid, "targeted")
                seq[0] += 1
                said = teacher_msg if asked else {}
                row = self._pair_row(base, seq[0], "targeted", mirror, said, outcome, conf, thr, reasoning)
                if audit or not asked:
                    row["actual_cost_usd"] = (
                        0.0  # the audit row already bills this answer of the teacher / none
                    )
                else:
                    targeted = 1
                    pair_costs += row["actual_cost_usd"]
                    audit_cost += row["actual_cost_usd"]
                rows.append(row)
                s.pending.append(dataclasses.replace(mirrored, role="targeted", outcome=outcome))
        for row in rows[1:]:
            dep = self._deployment(row["version"], task)
            if dep is not None and not dep.gone:
                if row["pair_role"] == "mirror":
                    dep.mirror_rows += 1
                elif row["pair_role"] == "targeted":
                    dep.targeted_rows += 1
                else:
                    dep.pair_rows += 1
        correct = compare(task, ex.expected, answer)
        stats = {
            "served_by": served_by,
            "correct": correct,
            "teacher_cost": true_teacher_cost,
            "actual": actual + pair_costs,
            "audit": int(audit),
            "audit_cost": audit_cost,
            "targeted": targeted,
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
        reasoning: int,
    ) -> dict:
        c = tokens_of(_cj(msg)) + reasoning
        p = base["prompt_tokens"]
        teacher_cost = self._cost(self.prices, p, c)
        student_cost = self._cost((STUDENT_PRICE_IN, STUDENT_PRICE_OUT), p, c)
        teacher = role in ("audit", "targeted")  # the row holds the teacher's answer
        return pair_row(
            **base,
            seq=seq,
            version=version,
            served_by="teacher" if teacher else "student",
            answer=redact_text(msg["content"]) if msg.get("content") else "",
            tool_calls=_cj(msg["tool_calls"]) if msg.get("tool_calls") else "",
            finish_reason="tool_calls" if msg.get("tool_calls") else "stop",
            completion_tokens=c,
            reasoning_tokens=reasoning,
            total_tokens=p + c,
            teacher_cost_usd=teacher_cost,
            actual_cost_usd=teacher_cost if teacher else student_cost,
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
        if number == self.cfg.bad_deploy_version and not isinstance(s.models[adm.version], CorruptedStudent):
            s.models[adm.version] = CorruptedStudent(s.models[adm.version], self.cfg.corrupt_share)
        corrupted = isinstance(s.models[adm.version], CorruptedStudent)
        old = self._deployment(adm.replaces, adm.task) if adm.replaces else None
        if old is not None:
            old.stage, old.superseded_day, old.superseded_by = "superseded", day, adm.version
        s.deployments.append(Deployment(adm.version, adm.task, number, day, corrupted))
        event: dict[str, Any] = {
            "day": day,
            "request": i,
            "action": "admit",
            "version": adm.version,
            "task": adm.task,
            "to": "shadow",
            # what the manifest's reason says: the certificate, and beside a live version the evidence budget
            # (release.budget: its rate, the targeted stream's p_hi, the arithmetic), as the sensor signs them
            "message": adm.message,
        }
        if adm.audit_rate is not None:
            event["audit_rate"] = adm.audit_rate
        if adm.target_audit_rate is not None:
            event["target_audit_rate"] = adm.target_audit_rate
        if adm.replaces:  # what the audit log says too: the version replaced, with its evidence
            event.update(supersedes=adm.replaces, its_evidence=adm.replaced_evidence)
        s.events.append(event)

    def _tick(self, day: int, i: int) -> None:
        """One sensor evaluation: ``decide_tick`` on what is in memory, then apply its plan."""
        s = self.s
        pending = [dataclasses.replace(r, segment="pending", index=k) for k, r in enumerate(s.pending)]
        today = (date.fromisoformat(self.cfg.start_day) + timedelta(days=day - 1)).isoformat()
        plan = decide_tick(
            s.manifest,
            s.candidates,
            s.tracks,
            [("pending", pending)],
            s.rule,
            today=today,
            traffic=self.traffic,
        )
        for line in plan.waiting:  # why a candidate is not admitted: once per version and reason
            version = line.split(" ", 1)[0]
            if (version, line) not in self.waits_seen:
                self.waits_seen.add((version, line))
                s.events.append(
                    {"day": day, "request": i, "action": "wait", "version": version, "message": line}
                )
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
        apply_decision(
            s.manifest,
            d,
            s.history,
            healthy_versions(statuses, plan.tracks, d.task),
            supported_versions(plan.tracks, d.task),
            plan.watch_rates.get(d.task),
        )
        self._publish(decision_statuses(d, s.manifest.task(d.task)))
        s.tracks = plan.tracks_after(s.rule)
        if d.action == "rollback":
            if dep is not None:
                dep.rolled_back_day, dep.stage = day, "rolled_back"
                dep.audits_to_rollback = track.rollback.n
            rel = s.manifest.task(d.task)
            took_over = self._deployment(rel.version, d.task) if rel.stage == "live" else None
            if (
                took_over is not None and took_over.stage != "live"
            ):  # the candidate took over (rollback_release)
                took_over.stage, took_over.max_percent = "live", 100.0
                if took_over.live_day is None:
                    took_over.live_day = day
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
        from ratchet_assets.night.adapter import row_tasks
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
        student, record = self._train(Path(train.path), day, date_s, row_tasks(self.artifacts, date_s))
        # A version is its content (release.content): the same weights as an earlier night's are that version.
        content = content_digest(student.weights, f"sim-{cfg.student}-student", "", "sim")
        same = existing_version(self.contents, content)
        if same is not None:
            version = same
            student = s.models[same]
        else:
            self.version_count += 1
            version = f"v{self.version_count}-{student.digest[:8]}"
            self.contents.append((version, content))
            self.minted_day[version] = day
            if self.version_count == cfg.worse_version:  # wrong everywhere, on the golden rows too
                student = CorruptedStudent(student, cfg.worse_share, evaluated=True)
            s.models[version] = student
        # the version's launch record; a re-certified one's is tonight's, its folder kept
        if record is not None:
            kept = self.lora_records.get(version, {}).get("adapter_dir", record["adapter_dir"])
            self.lora_records[version] = {**record, "version": version, "adapter_dir": kept}
        golden = load_golden(self.artifacts, date_s)
        answers = [Answer(*_golden_answer(student, g)) for g in golden]
        baselines = {}
        for task in sorted({g.task for g in golden}):
            live = incumbent(s.manifest.task(task))  # the candidate in the slot, else live (night step's)
            if live in s.models:
                model = s.models[live]
                baselines[task] = (
                    live,
                    [Answer(*_golden_answer(model, g)) for g in golden if g.task == task],
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
        cert_file = self.layout.certificate_predicate(version if same is None else f"{version}@{date_s}")
        cert_file.parent.mkdir(parents=True, exist_ok=True)
        # Unsigned: the simulator holds no signing key; the numbers are the certificate's own.
        cert_file.write_bytes(canonical_json(predicate))
        tasks = {}
        for task, sec in sorted(predicate["tasks"].items()):
            n = certificate_numbers(predicate, task)
            if sec["certified"] and (version, task) not in self.certified_pairs:
                self.certified_pairs.append((version, task))
            tasks[task] = {
                "n": sec["n"],
                "correct": sec["correct"],
                "lower_bound": round(sec["lower_bound"], 6),
                "certified": sec["certified"],
                "threshold": n.ltt_threshold,
                "point_threshold": n.point_threshold,
                "mcnemar": None
                if n.paired is None
                else {
                    "live": n.paired.baseline,
                    "b": n.paired.b,
                    "c": n.paired.c,
                    "p": round(sec["mcnemar"]["p_value"], 6),
                },
            }
            if sec["certified"] and same is not None:
                # Re-certified: a queued candidate gets the new numbers; anything else starts no rollout.
                s.candidates = [
                    dataclasses.replace(
                        c, lower_bound=n.lower_bound, threshold=n.ltt_threshold, paired=n.paired
                    )
                    if (c.version, c.task) == (version, task)
                    else c
                    for c in s.candidates
                ]
            elif sec["certified"]:  # what the versions registry does with a signed certificate
                s.candidates.append(
                    Candidate(
                        version,
                        task,
                        n.ltt_threshold,
                        n.lower_bound,
                        cert_file.name,
                        point_threshold=n.point_threshold,
                        paired=n.paired,
                    )
                )
        self.night_certified.append({task: bool(sec["certified"]) for task, sec in tasks.items()})
        out = {
            "version": version,
            "recertified": same is not None,
            "traffic_rows": traffic.rows,
            "examples": examples.examples,
            "golden_size": split.golden_size,
            "golden_root": split.golden_root,
            "train_rows": train.rows,
            "train_root": train.rows_root,
            "certificate": tasks,
        }
        if record is not None:
            out["training"] = record["training"]
        return out

    def _train(
        self, train_jsonl: Path, day: int, date_s: str, tasks: list[str]
    ) -> tuple[Student, dict[str, Any] | None]:
        """The night's student, and with ``--student lora`` its launch record (``night.adapter``'s fields that
        ``night.warm_start`` reads). The LoRA night starts as the product's does: warm from the newest version live
        or certified for one of its tasks (not rejected or rolled back) when ``warm_start.plan_start`` allows it,
        on the new rows, a replay sample and every held-out group; else cold on every row."""
        if self.cfg.student == "fast":
            return FastStudent.train(train_jsonl), None
        from ratchet_assets.night import warm_start
        from ratchet_assets.sim.student import LoraStudent
        from ratchet_core.student_model import base_identity, ensure_demo_base

        base = ensure_demo_base(self.home / "models" / "demo-base")
        names = sorted(set(tasks) - {"?"})
        factor = budget_factor(self.night_certified, set(names))
        config = lora_night_config(self.cfg.seed, factor)
        base_sha = base_identity(base)["sha256"]
        policies = warm_start.policies_sha256(dict(self.s.manifest.policies), names)
        live, certified = self._parents()
        plan = warm_start.plan_start(
            self.artifacts,
            date_s,
            base=base,
            tasks=names,
            base_sha256=base_sha,
            train_config=config.to_dict(),
            policies_digest=policies,
            records=self.lora_records,
            live=live,
            certified=certified,
        )
        out = self.layout.adapter_dir(f"night-{day}")
        init, held = None, None
        if plan.mode == "warm":
            assert plan.parent is not None and plan.rows is not None
            init = self.layout.resolve(plan.parent.record["adapter_dir"])
            subset = self.home / "staging" / f"night-{day}.train.jsonl"
            subset.parent.mkdir(parents=True, exist_ok=True)
            warm_start.write_subset(train_jsonl, plan.rows, subset)
            train_jsonl, tasks, held = subset, [tasks[i] for i in plan.rows], plan.held
        student = LoraStudent.train(base, train_jsonl, out, config, tasks, init, held)
        result = student.trained
        record = {
            "adapter_sha256": student.digest,
            "train_day": date_s,
            "adapter_dir": self.layout.name_of(out),
            "base": {"sha256": base_sha},
            "hyperparameters": config.to_dict(),
            "policies_sha256": policies,
            "start": plan.to_record(config.replay_share, config.replay_cap),
            "training": {
                "start": plan.mode,
                "reason": plan.reason,
                "rows": result.examples,
                "steps": result.steps,
                "budget_factor": factor,
            },
        }
        return student, record

    def _parents(self) -> tuple[dict[str, str | None], list[tuple[str, str]]]:
        """What a warm night chooses its parent from, as ``night.adapter.release_view`` reads it: task -> the live
        version of the manifest, and the (version, task) pairs certified by a night whose registry status is not
        ``rejected`` or ``rolled_back``."""
        gone = {key for key, status in self.s.statuses.items() if status in ("rejected", "rolled_back")}
        live = {task: rel.live_version for task, rel in self.s.manifest.tasks.items()}
        return live, [pair for pair in self.certified_pairs if pair not in gone]

    def _flywheel(self) -> dict[str, Any]:
        """Per task, what issue-level release health is measured by: versions minted (nights whose adapter was new
        content; the same count for every task) and re-certified, versions deployed (admitted to shadow) and
        reaching live, days from a version's certificate (the night that minted it) to live, days whose served
        precision on the task was below its target, and the teacher's pay for audits (evidence spend)."""
        target = self.cfg.target
        out: dict[str, Any] = {}
        minted = len(self.contents)
        recertified = self.nights - minted
        for task, days in sorted(self.flywheel_days.items()):
            deps = [d for d in self.s.deployments if d.task == task]
            live = [d for d in deps if d.live_day is not None]
            spend = sum(v[2] for v in days.values())
            out[task] = {
                "versions_minted": minted,
                "recertified_nights": recertified,
                "versions_deployed": len(deps),
                "versions_reached_live": len(live),
                "days_certificate_to_live": [
                    d.live_day - self.minted_day.get(d.version, d.day - 1) for d in live
                ],
                "days_below_target": [
                    day for day, v in sorted(days.items()) if v[0] and v[1] / v[0] < target
                ],
                "precision_by_day": [
                    round(v[1] / v[0], 6) if v[0] else None for _, v in sorted(days.items())
                ],
                "evidence_spend_usd": round(spend, 6),
            }
        return out

    # the run -----------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        from ratchet_assets.night.fixtures import write_segment

        cfg, s = self.cfg, self.s
        records = []
        cum_audits = 0
        totals = {"teacher": 0.0, "actual": 0.0, "requests": 0, "student": 0, "correct": 0}
        sealer = None
        if cfg.receipts:
            from ratchet_assets.sim.receipts import ReceiptSealer

            sealer = ReceiptSealer(self.home, cfg.seed, cfg.teacher_model)
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
                "targeted": 0,
            }
            by_task: dict[str, list[int]] = {}  # task -> [requests, served by the student]
            task_cost: dict[str, float] = {}  # task -> the all-teacher cost of its requests
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
                task_cost[ex.task] = task_cost.get(ex.task, 0.0) + st["teacher_cost"]
                fw = self.flywheel_days.setdefault(ex.task, {}).setdefault(day, [0, 0, 0.0])
                fw[0] += 1
                fw[1] += st["correct"]
                fw[2] += st["audit_cost"]
                agg["correct"] += st["correct"]
                agg["student_correct"] += student and st["correct"]
                agg["teacher"] += st["teacher_cost"]
                agg["actual"] += st["actual"]
                agg["audit"] += st["audit"]
                agg["shadow"] += st["shadow"]
                agg["targeted"] += st["targeted"]
            self._tick(day, cfg.requests)
            self.traffic = {t: (float(c[0]), task_cost[t] / c[0]) for t, c in sorted(by_task.items())}
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
            self.nights += 1
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
                    "targeted_pairs": agg["targeted"],
                    "cumulative": cum_audits,
                },
                "events": s.events[first_event:],
                "night": night,
            }
            if sealer is not None:  # the night's receipt step, on the traffic the night consolidated
                record["receipt"] = sealer.seal(self.artifacts, date_s, agg["teacher"])
            records.append(record)
            totals["teacher"] += agg["teacher"]
            totals["actual"] += agg["actual"]
            totals["requests"] += n
            totals["student"] += agg["student"]
            totals["correct"] += agg["correct"]
            if self.on_day is not None:
                self.on_day(record)
        if sealer is not None:
            sealer.close()
        first_90 = next((r["day"] for r in records if r["student_share"] >= 0.9), None)
        deps = s.deployments
        summary = {
            "requests": totals["requests"],
            "student_share": round(totals["student"] / totals["requests"], 6),
            "served_precision": round(totals["correct"] / totals["requests"], 6),
            "all_teacher_usd": round(totals["teacher"], 6),
            "actual_usd": round(totals["actual"], 6),
            "saved_usd": round(totals["teacher"] - totals["actual"], 6),
            "cost_ratio": round(totals["actual"] / totals["teacher"], 6) if totals["teacher"] else None,
            "first_day_student_share_90": first_90,
            "deployments": [d.to_dict() for d in deps],
            "releases": {
                "rolled_back": [d.version for d in deps if d.rolled_back_day is not None],
                "audits_to_rollback": [d.audits_to_rollback for d in deps if d.rolled_back_day is not None],
                "superseded": [d.version for d in deps if d.superseded_day is not None],
                "reached_live": [d.version for d in deps if d.live_day is not None],
            },
            "flywheel": self._flywheel(),
            "task_policy": cfg.task_policy().model_dump(mode="json"),
            "manifest_sequence": s.manifest.sequence,
            "teacher_price_per_token": {
                "model": cfg.teacher_model,
                "input": self.prices[0],
                "output": self.prices[1],
            },
            "student_price_per_token": {"input": STUDENT_PRICE_IN, "output": STUDENT_PRICE_OUT},
        }
        if sealer is not None:
            signed = [r["receipt"] for r in records]
            te, true = (
                sum(r["teacher_equivalent_usd"] for r in signed),
                sum(r["true_all_teacher_usd"] for r in signed),
            )
            summary["receipts"] = {
                "teacher_equivalent_usd": round(te, 6),
                "true_all_teacher_usd": round(true, 6),
                "estimate_error": round(te / true - 1.0, 6) if true else None,
                "public_key": "sim-receipt-key.pub",
            }
        return {"config": dataclasses.asdict(cfg), "days": records, "summary": summary}


def budget_factor(nights: list[dict[str, bool]], tasks: set[str]) -> int:
    """The step budget's factor for a night training ``tasks`` (``night.step_budget``, the product's rule): doubled
    for every consecutive night, newest first, that evaluated one of them and did not certify it; at most
    ``MAX_FACTOR``. ``nights``: per earlier night, oldest first, task -> certified."""
    from ratchet_assets.night.step_budget import budget_of

    failed = ([t for t in sorted(tasks) if t in night and not night[t]] for night in reversed(nights))
    return budget_of({"tasks": names} if names else None for names in failed).factor


def lora_night_config(seed: int, factor: int) -> Any:
    """What ``--student lora`` trains with: the night's settings (``night.adapter.NIGHT_TRAINING``: validation
    split, refit on every row, extensions, a warm start where its parent allows one) scaled by the step budget's
    ``factor``, seeded by the run's seed."""
    from ratchet_assets.night.adapter import NIGHT_TRAINING
    from ratchet_assets.night.lora_trainer import LoraTrainConfig
    from ratchet_assets.night.step_budget import StepBudget

    config = dataclasses.replace(NIGHT_TRAINING, seed=seed)
    return LoraTrainConfig(**StepBudget(factor).apply(config.to_dict()))


def _golden_answer(model: Student, row: Any) -> tuple[dict[str, Any], float]:
    """A version's answer to a golden row as the night's evaluation sees it (``CorruptedStudent.evaluate``)."""
    if isinstance(model, CorruptedStudent):
        return model.evaluate(row.key, row.task, row.messages, row.tools, row.response_format)
    return model.answer(row.task, row.messages, row.tools, row.response_format)


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
