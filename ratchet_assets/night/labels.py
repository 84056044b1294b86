"""People's labels: what the applications' recorded feedback (``ratchet_core.feedback``) changes in a night.

:func:`load_labels` reads the control DB as a step runs (like ``night.erasures``), leaving out the feedback of
erased requests and example keys:

- **demonstrations** (example key -> label): a recorded demonstration is the correct answer to its request, so it
  replaces the teacher's answer as the label of the request's example key, in the training set
  (``night.training_set``) and in the golden set (``night.split``, where the row is marked ``label_source =
  people`` and keeps the teacher's answer beside it for the certificate's teacher agreement). Several for one
  key: the newest wins (received time, then client and feedback id);
- **bad keys**: a teacher-served request whose recorded feedback the task's ``bad_when`` calls bad (or an episode
  of the client's with such feedback, over the episode's teacher-served requests of that task in the days given)
  says the teacher's answer, the label, was bad: its key is kept out of training unless a demonstration fixes the
  label. Bad feedback on a student's answer says nothing about the teacher's label (it is release evidence).

Every label source a night uses is recorded: per training row in the training set's labels tree, per golden row in
its leaf, and the digest of what :func:`load_labels` returned in the training set's commitment.

:func:`settle_from_traffic` settles pending items (``ratchet_core.feedback.settle_pending``) whose request the
day's traffic holds: the night sees every replica's rows, sealed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from ratchet_assets.night.erasures import Erasures
from ratchet_core import feedback as fb
from ratchet_core.layout import ArtifactLayout
from ratchet_core.task_policy import TaskPolicy
from ratchet_stats.canonical import canonical_json, sha256_hex

LABEL_SOURCES = ("teacher", "people", "import")


@dataclass(frozen=True)
class Labels:
    """What the night takes from feedback (module docstring)."""

    demonstrations: dict[str, str] = field(default_factory=dict)  # key -> canonical JSON assistant message
    bad: frozenset[str] = frozenset()  # keys whose teacher label feedback called bad (no demonstration)
    items: int = 0  # recorded items read

    @property
    def digest(self) -> str:
        """SHA-256 of the labels and bad keys, canonical: what the training set's commitment records."""
        doc = {"demonstrations": dict(sorted(self.demonstrations.items())), "bad": sorted(self.bad)}
        return sha256_hex(canonical_json(doc))

    def table(self) -> pa.Table:
        """(example_key, answer) of every demonstration, sorted by key (registered in DuckDB as ``people``)."""
        keys = sorted(self.demonstrations)
        return pa.table(
            {
                "example_key": pa.array(keys, pa.string()),
                "people_answer": pa.array([self.demonstrations[k] for k in keys], pa.string()),
            }
        )


def load_labels(
    engine: Any,
    policies: Mapping[str, TaskPolicy] | None = None,
    erasures: Erasures | None = None,
    artifacts_root: str | Path | None = None,
    days: Iterable[str] = (),
) -> Labels:
    """The labels of the recorded feedback now in the control DB (module docstring); `days`: the traffic days an
    episode's requests are looked up in (the training window)."""
    if engine is None:
        return Labels()
    from ratchet_core.control_db import feedback

    erasures = erasures or Erasures()
    policies = policies or {}
    items = [
        r
        for r in fb.rows(engine, feedback.c.state == "recorded")
        if r["request_id"] not in erasures.request_ids and r["example_key"] not in erasures.example_keys
    ]
    newest: dict[str, tuple[str, str, str, str]] = {}
    for r in items:
        if (message := fb.demonstration(r)) is not None and r["example_key"]:
            order = (r["received_at"], r["client"], r["feedback_id"])
            if r["example_key"] not in newest or order > newest[r["example_key"]][:3]:
                newest[r["example_key"]] = (*order, _canonical(message))
    demonstrations = {k: v[3] for k, v in newest.items()}
    bad: set[str] = set()
    episodes: list[Mapping[str, Any]] = []
    for r in items:
        if fb.verdict(r, policies.get(r["task"] or "")) is not True or r["kind"] == "demonstration":
            continue
        if r["target"] == "episode":
            episodes.append(r)
        elif r["served_by"] == "teacher" and r["example_key"]:
            bad.add(r["example_key"])
    if episodes and artifacts_root is not None:
        bad |= _episode_keys(artifacts_root, list(days), episodes, erasures)
    return Labels(demonstrations, frozenset(bad - set(demonstrations)), len(items))


def _canonical(message: Mapping[str, Any]) -> str:
    """The assistant message as the examples step writes answers (``night.examples.assistant_message``)."""
    from ratchet_assets.night import canonical_text

    return canonical_text(
        {
            "role": "assistant",
            "content": message.get("content") or None,
            "tool_calls": message.get("tool_calls") or None,
        }
    )


def _episode_keys(
    artifacts_root: str | Path, days: list[str], episodes: list[Mapping[str, Any]], erasures: Erasures
) -> set[str]:
    """Example keys of the teacher-served requests of the given (client, episode, task)s in the days' traffic."""
    from ratchet_assets.night import connect, sql_list

    layout = ArtifactLayout(artifacts_root)
    files = [p for d in days if (p := layout.traffic_file(d)).exists()]
    if not files:
        return set()
    con = connect()
    con.register(
        "bad_episodes",
        pa.table(
            {
                "client": [e["client"] for e in episodes],
                "episode": [e["episode"] for e in episodes],
                "task": [e["task"] for e in episodes],
            }
        ),
    )
    cols = "request_id, client, task, day, served_by, version, messages, tools, response_format, answer, tool_calls"
    try:
        rows = con.execute(
            f"""SELECT {", ".join("t." + c for c in cols.split(", "))}
                FROM read_parquet({sql_list(files)}, union_by_name = true) t
                JOIN (SELECT DISTINCT client, episode, task FROM bad_episodes) b
                  ON t.client = b.client AND t.episode = b.episode AND t.task = b.task
                WHERE t.kind = 'request' AND t.served_by = 'teacher' AND t.messages <> ''"""
        ).fetchall()
    except Exception:  # traffic of older days has no episode column: no episode there
        rows = []
    finally:
        con.close()
    names = cols.split(", ")
    out = set()
    for r in rows:
        request = fb.StoredRequest(**{n: v or "" for n, v in zip(names, r, strict=True)})
        if request.request_id not in erasures.request_ids:
            out.add(request.example_key())
    return out


def settle_from_traffic(
    engine: Any, artifacts_root: str | Path, day: str, policies: Mapping[str, TaskPolicy]
) -> int:
    """Settle the pending items whose request (or episode) the day's traffic holds; return how many."""
    from ratchet_assets.night import connect, sql_str

    if engine is None:
        return 0
    waiting = fb.pending(engine, limit=100_000)
    path = ArtifactLayout(artifacts_root).traffic_file(day)
    if not waiting or not path.exists():
        return 0
    con = connect()
    src = f"read_parquet({sql_str(str(path))}, union_by_name = true)"
    ids = sorted({r["request_id"] for r in waiting if r["target"] == "request"})
    cols = ["request_id", "client", "task", "day", "served_by", "version", "messages", "tools"]
    cols += ["response_format", "answer", "tool_calls"]
    found: dict[str, fb.StoredRequest] = {}
    if ids:
        con.register("wanted", pa.table({"request_id": pa.array(ids, pa.string())}))
        for r in con.execute(
            f"SELECT {', '.join(cols)} FROM {src} WHERE kind = 'request' "
            "AND request_id IN (SELECT request_id FROM wanted)"
        ).fetchall():
            found.setdefault(r[0], fb.StoredRequest(**{c: v or "" for c, v in zip(cols, r, strict=True)}))
    episodes: set[tuple[str, str]] = set()
    if any(r["target"] == "episode" for r in waiting):
        try:
            episodes = {
                (c, e)
                for c, e in con.execute(
                    f"SELECT DISTINCT client, episode FROM {src} WHERE episode <> ''"
                ).fetchall()
            }
        except Exception:  # an older day's traffic: no episode column
            episodes = set()
    con.close()
    return fb.settle_pending(engine, waiting, found, policies, lambda c, e: (c, e) in episodes)


def labelled_count(labels: Labels) -> dict[str, Any]:
    """Counts for metadata and logs."""
    return {
        "feedback_items": labels.items,
        "demonstrations": len(labels.demonstrations),
        "bad": len(labels.bad),
    }


def import_label_sources(artifacts_root: str | Path, files: Iterable[Path]) -> dict[str, str]:
    """import id -> the label source its provenance names (``ratchet import --label-source``; ``import`` when
    it names none: an import made before label sources were recorded)."""
    layout = ArtifactLayout(artifacts_root)
    out = {}
    for path in files:
        import_id = path.parent.name
        prov = layout.import_provenance(import_id)
        source = "import"
        if prov.exists():
            source = json.loads(prov.read_text()).get("label_source") or "import"
        out[import_id] = source if source in LABEL_SOURCES else "import"
    return out
