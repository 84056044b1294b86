"""The live-run harness: a measured run against any gateway URL under a hard dollar cap.

- :func:`plan`: requests per stage (rounds x requests, the control arm's share), golden size, and the dollars of
  one round at the teacher's prices: every request is priced at its *upper bound*, the prompt counted with the
  teacher's tokenizer plus ``max_tokens`` of completion (``ratchet_core.pricing``), and ``max_tokens`` is sent
  with it, so what a request can cost is known before it is sent.
- :func:`smoke`: a few requests through the gateway and a few control calls straight to the teacher; checks the
  answers and the ``x-ratchet-*`` headers.
- :func:`run`: ``rounds`` rounds of a workload; each request goes through the gateway (treatment) or, for the
  control share, straight to the teacher (control arm); a night (a command) between rounds. **Every request first
  asks the effect gate** (type ``liverun.<run id>``, spend cap ``max_usd`` set on it) with its upper-bound cost:
  ``execute`` sends it and reports the actual cost; ``denied`` (the cap would be exceeded) stops the run there.
  So the dollars spent never exceed the cap: reserved upper bounds are summed before anything is sent.
- :func:`report`: savings and quality of the treatment arm against the control arm, from the run's rows.
- :func:`sign` / :func:`verify`: the run's summary is an in-toto Statement whose subjects are the SHA-256 of every
  file of the run (plan, rows, report), DSSE-signed with the control plane's key; ``verify`` checks the signature
  first, then every file's digest.

A run folder holds ``plan.json``, ``rows.jsonl`` (one line per request, both arms), ``report.json`` and
``run.dsse.json``.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

PREDICATE_TYPE = "https://ratchet.dev/liverun/v1"
FILES = ("plan.json", "rows.jsonl", "report.json")


@dataclass(frozen=True)
class Plan:
    workload: str
    rounds: int
    requests_per_round: int
    control_share: float
    golden_size: int
    max_tokens: int
    teacher_model: str
    usd_per_request_max: float
    usd_per_round_max: float
    usd_total_max: float
    requests_per_stage: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _examples(workload: str, n: int, seed: int, day: int = 0):
    from ratchet_core.workloads import get_workload

    return get_workload(workload).generate(n, seed=seed, day=day)


def upper_bound_usd(teacher_model: str, body: dict[str, Any], max_tokens: int) -> float:
    """What one request can cost at most at the teacher's prices: its prompt plus ``max_tokens`` of answer."""
    from ratchet_core import pricing

    prices = pricing.model_prices(teacher_model)
    prompt = pricing.prompt_tokens(
        teacher_model, body["messages"], body.get("tools"), body.get("response_format")
    )
    return prompt * prices.input_per_token + max_tokens * prices.output_per_token


def plan(
    workload: str,
    rounds: int,
    requests_per_round: int,
    teacher_model: str,
    control_share: float = 0.2,
    golden_share: float = 0.1,
    max_tokens: int = 256,
    seed: int = 0,
) -> Plan:
    sample = _examples(workload, min(requests_per_round, 50), seed)
    per_request = max(upper_bound_usd(teacher_model, ex.request_body(), max_tokens) for ex in sample)
    control = round(requests_per_round * control_share)
    per_round = per_request * requests_per_round
    return Plan(
        workload=workload,
        rounds=rounds,
        requests_per_round=requests_per_round,
        control_share=control_share,
        golden_size=int(rounds * (requests_per_round - control) * golden_share),
        max_tokens=max_tokens,
        teacher_model=teacher_model,
        usd_per_request_max=per_request,
        usd_per_round_max=per_round,
        usd_total_max=per_round * rounds,
        requests_per_stage={
            "smoke": 6,
            "treatment_per_round": requests_per_round - control,
            "control_per_round": control,
            "total": 6 + rounds * requests_per_round,
        },
    )


def _chat(
    base_url: str, key: str, model: str, body: dict[str, Any], task: str, max_tokens: int
) -> httpx.Response:
    return httpx.post(
        base_url.rstrip("/") + "/chat/completions",
        headers={"Authorization": f"Bearer {key}", "X-Ratchet-Task": task},
        json={**body, "model": model, "max_tokens": max_tokens},
        timeout=120,
    )


def _cost(teacher_model: str, usage: dict[str, Any] | None) -> float:
    from ratchet_core import pricing

    if not usage:
        return 0.0
    prices = pricing.model_prices(teacher_model)
    return (
        usage.get("prompt_tokens", 0) * prices.input_per_token
        + usage.get("completion_tokens", 0) * prices.output_per_token
    )


def smoke(gateway: str, key: str, teacher: str, teacher_key: str, teacher_model: str, workload: str) -> dict:
    """Three requests through the gateway, three straight to the teacher; every answer checked."""
    from ratchet_core.workloads import compare

    out: dict[str, Any] = {"gateway": [], "control": []}
    bare = teacher_model.split("/", 1)[-1]
    for i, ex in enumerate(_examples(workload, 3, seed=999)):
        for arm, url, k, model in (
            ("gateway", gateway, key, "ratchet"),
            ("control", teacher, teacher_key, bare),
        ):
            r = _chat(url, k, model, ex.request_body(), ex.task, 256)
            ok = r.status_code == 200
            message = r.json()["choices"][0]["message"] if ok else {}
            out[arm].append(
                {
                    "i": i,
                    "status": r.status_code,
                    "correct": bool(ok and compare(ex.task, ex.expected, message)),
                    "served_by": r.headers.get("x-ratchet-served-by"),
                }
            )
    out["ok"] = all(x["status"] == 200 for arm in ("gateway", "control") for x in out[arm]) and all(
        x["served_by"] in ("teacher", "student") for x in out["gateway"]
    )
    return out


def run(
    folder: Path,
    the_plan: Plan,
    gateway: str,
    key: str,
    teacher: str,
    teacher_key: str,
    max_usd: float,
    engine: Any,
    night: Callable[[int], None] | None = None,
    run_id: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The measured run (module docstring). Stops at the cap; returns the run's totals."""
    from ratchet_assets.effects import EffectLedger
    from ratchet_core.workloads import compare

    folder.mkdir(parents=True, exist_ok=True)
    run_id = run_id or hashlib.sha256(f"{time.time_ns()}".encode()).hexdigest()[:12]
    effect_type = f"liverun.{run_id}"
    gate = EffectLedger(engine)
    gate.set_rules(effect_type, reason=f"live run {run_id}: hard cap --max-usd {max_usd}", cap_usd=max_usd)
    (folder / "plan.json").write_text(
        json.dumps({**the_plan.to_dict(), "run_id": run_id, "max_usd": max_usd})
    )
    bare = the_plan.teacher_model.split("/", 1)[-1]
    stopped = None
    sent = 0
    with (folder / "rows.jsonl").open("w") as rows:
        for rnd in range(the_plan.rounds):
            examples = _examples(the_plan.workload, the_plan.requests_per_round, seed, day=rnd)
            control_every = round(1 / the_plan.control_share) if the_plan.control_share > 0 else 0
            for i, ex in enumerate(examples):
                arm = "control" if control_every and i % control_every == 0 else "treatment"
                body = ex.request_body()
                bound = upper_bound_usd(the_plan.teacher_model, body, the_plan.max_tokens)
                fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
                began = gate.begin(effect_type, f"{rnd}:{i}:{arm}", fingerprint, cost_usd=bound)
                if began.outcome != "execute":
                    stopped = {"round": rnd, "index": i, "outcome": began.outcome, "detail": began.detail}
                    break
                url, k, model = (
                    (teacher, teacher_key, bare) if arm == "control" else (gateway, key, "ratchet")
                )
                try:
                    r = _chat(url, k, model, body, ex.task, the_plan.max_tokens)
                except httpx.HTTPError as exc:
                    gate.fail(began.token, f"{type(exc).__name__}")  # unknown spend: the bound stays reserved
                    continue
                doc = r.json() if r.status_code == 200 else {}
                served = "teacher" if arm == "control" else r.headers.get("x-ratchet-served-by", "")
                # What this request cost: the teacher's bill when the teacher answered, nothing for a student.
                cost = _cost(the_plan.teacher_model, doc.get("usage")) if served == "teacher" else 0.0
                teacher_equivalent = _cost(the_plan.teacher_model, doc.get("usage"))
                message = (doc.get("choices") or [{}])[0].get("message") or {}
                gate.report(began.token, {"status": r.status_code}, cost_usd=min(cost, bound))
                sent += 1
                row = {
                    "round": rnd,
                    "index": i,
                    "arm": arm,
                    "task": ex.task,
                    "status": r.status_code,
                    "served_by": served,
                    "correct": bool(message and compare(ex.task, ex.expected, message)),
                    "cost_usd": min(cost, bound),
                    "teacher_equivalent_usd": teacher_equivalent,
                    "bound_usd": bound,
                }
                rows.write(json.dumps(row, sort_keys=True) + "\n")
            if stopped:
                break
            if night is not None and rnd < the_plan.rounds - 1:
                night(rnd)
    spend = gate.spend(effect_type)
    return {
        "run_id": run_id,
        "sent": sent,
        "stopped": stopped,
        "spent_usd": spend["used_usd"],
        "max_usd": max_usd,
    }


def night_command(command: str) -> Callable[[int], None]:
    """A night between rounds: a shell command (e.g. the night's Dagster materialisation); it must succeed."""

    def night(rnd: int) -> None:
        subprocess.run(command, shell=True, check=True)

    return night


def report(folder: Path) -> dict[str, Any]:
    """Savings and quality of the treatment arm against the control arm (straight to the teacher)."""
    rows = [json.loads(line) for line in (folder / "rows.jsonl").read_text().splitlines() if line]
    out: dict[str, Any] = {}
    for arm in ("treatment", "control"):
        mine = [r for r in rows if r["arm"] == arm]
        n = len(mine)
        out[arm] = {
            "requests": n,
            "accuracy": sum(r["correct"] for r in mine) / n if n else None,
            "student_share": sum(r["served_by"] == "student" for r in mine) / n if n else None,
            "cost_usd": sum(r["cost_usd"] for r in mine),
            "teacher_equivalent_usd": sum(r["teacher_equivalent_usd"] for r in mine),
        }
    t = out["treatment"]
    out["saved_usd"] = t["teacher_equivalent_usd"] - t["cost_usd"]
    out["accuracy_delta"] = (
        None
        if t["accuracy"] is None or out["control"]["accuracy"] is None
        else t["accuracy"] - out["control"]["accuracy"]
    )
    out["spent_usd"] = sum(r["cost_usd"] for r in rows)
    (folder / "report.json").write_text(json.dumps(out, sort_keys=True, indent=2))
    return out


def _subjects(folder: Path) -> list[dict[str, Any]]:
    return [
        {"name": name, "digest": {"sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest()}}
        for name in FILES
    ]


def sign(folder: Path, private_key: Any) -> Path:
    """Sign the run: an in-toto Statement over every file's SHA-256 with the report as its predicate."""
    from ratchet_stats.dsse import make_statement, sign_statement

    predicate = {
        "report": json.loads((folder / "report.json").read_text()),
        "plan": json.loads((folder / "plan.json").read_text()),
    }
    envelope = sign_statement(make_statement(PREDICATE_TYPE, predicate, _subjects(folder)), private_key)
    path = folder / "run.dsse.json"
    path.write_text(json.dumps(envelope, sort_keys=True))
    return path


def verify(folder: Path, public_keys: Any) -> dict[str, Any]:
    """Check the signature first, then that every file still has the digest the statement signs."""
    from ratchet_stats.dsse import verify_statement

    statement = verify_statement((folder / "run.dsse.json").read_bytes(), public_keys, PREDICATE_TYPE)
    signed = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    now = {s["name"]: s["digest"]["sha256"] for s in _subjects(folder)}
    changed = sorted(name for name in signed if signed[name] != now.get(name))
    if changed:
        raise ValueError(f"files changed since the run was signed: {', '.join(changed)}")
    return statement["predicate"]["report"]
