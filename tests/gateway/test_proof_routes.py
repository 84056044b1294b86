"""Training-set proofs served by the gateway, checked end to end with the auditor's CLI.

Proofs are asked for by request id, for the caller's own requests only (a chat body is refused: replaying
another client's body must not yield a proof about that client's request), and a request sent after the version's
training data was collected gets none. Traffic goes through a running gateway with the real openai client; the
night's own code
(``consolidate_traffic`` + ``build_examples``) computes every request's example key from the sealed ledger, so the
keys the gateway proves are compared with the night's, not with the route's own computation. Part of the night's
keys form an adapter's training set (plus unrelated keys), committed in a BOM built by ``bom_document`` and signed;
the proofs the gateway returns must pass ``ratchet verify proof`` (member / absent) and forgeries must fail.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from .conftest import API_KEY, OTHER_KEY, running_gateway, sealed_rows

REPO = Path(__file__).resolve().parents[2]
VERSION = "v1-0123abcd"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}


@dataclass
class Sent:
    body: dict  # the chat body as the client sent it (what it later POSTs for a proof)
    headers: dict
    request_id: str
    night_key: str  # the example key the night's `examples` step gave this request


@dataclass
class World:
    url: str
    bom_dir: Path
    pub: str
    trained: list[Sent]
    absent: list[Sent]
    other_client: Sent
    lake_root: str


def _bodies() -> list[tuple[dict, dict]]:
    """Chat bodies of all three tasks (tools, response_format, PII); task by metadata or by header."""
    from ratchet_core.workloads import get_workload

    out = []
    for i, ex in enumerate(get_workload("mixed").generate(9, seed=5)):
        messages = copy.deepcopy(ex.messages)
        if i % 3 == 0:  # PII: the ledger and the key see a placeholder, not the address
            messages[-1]["content"] += f" You can reach me at jane.doe{i}@example.com."
        body: dict = {"model": "ratchet", "messages": messages}
        if ex.tools:
            body["tools"] = ex.tools
            if ex.tool_choice is not None:
                body["tool_choice"] = ex.tool_choice
        if ex.response_format:
            body["response_format"] = ex.response_format
        headers = {}
        if i % 2 == 0:
            body["metadata"] = {"ratchet_task": ex.task}
        else:
            headers = {"X-Ratchet-Task": ex.task}
        out.append((body, headers))
    return out


def _send(client: openai.OpenAI, body: dict, headers: dict) -> str:
    extra = {k: body[k] for k in ("metadata",) if k in body}
    args = {k: v for k, v in body.items() if k != "metadata"}
    raw = client.chat.completions.with_raw_response.create(**args, extra_body=extra, extra_headers=headers)
    raw.parse()
    return raw.headers["x-ratchet-request-id"]


def _night_keys(settings, day: str) -> dict[str, str]:
    import pyarrow.parquet as pq

    from ratchet_assets.night.examples import build_examples
    from ratchet_assets.night.traffic import consolidate_traffic

    consolidate_traffic(settings.lake_root, settings.artifacts_root, day)
    res = build_examples(settings.artifacts_root, day)
    t = pq.read_table(res.path, columns=["request_id", "example_key"]).to_pylist()
    return {r["request_id"]: r["example_key"] for r in t}


def _filler(i: int) -> str:
    return hashlib.sha256(f"someone-else-{i}".encode()).hexdigest()


def _write_bom(out: Path, train_keys: list[str], signing_key, train_name: str = "training-set") -> None:
    """A signed BOM committing to `train_keys` (key tree) via the night's own builder, plus train-keys.txt."""
    from ratchet_assets.night import bom_document as BD
    from ratchet_stats import bom_format as B
    from ratchet_stats import certificate as CERT
    from ratchet_stats import commitment as C
    from ratchet_stats.canonical import canonical_json
    from ratchet_stats.dsse import make_statement, sign_statement

    golden_keys = [_filler(1000 + i) for i in range(10)]
    train = BD.DataSet(
        train_name,
        "teacher answers",
        C.key_commitment(train_keys),
        C.row_commitment({"k": k} for k in train_keys),
    )
    golden = BD.DataSet(
        "golden-set",
        "held out",
        C.key_commitment(golden_keys),
        C.row_commitment({"g": k} for k in golden_keys),
    )
    cert = CERT.build_certificate(
        version=VERSION,
        base={"name": "ratchet-demo-base", "sha256": "e" * 64},
        adapter_sha256="0" * 64,
        golden_root=golden.keys.root,
        golden_size=golden.keys.size,
        target=0.9,
        delta=0.05,
        tasks=[CERT.TaskOutcomes("tickets", "label", [0.99] * 60, [True] * 60)],
    )
    files = {"adapter_config.json": "a" * 64, "adapter_model.safetensors": "b" * 64}
    document = BD.build_bom(
        version=VERSION,
        adapter_files=files,
        hyperparameters={"rank": 8},
        base={"name": "ratchet-demo-base", "sha256": "e" * 64, "files": {"config.json": "f" * 64}},
        base_license_id="Apache-2.0",
        train=train,
        golden=golden,
        teacher_model="openai/demo-teacher",
        certificate=cert,
        certificate_sha256="1" * 64,
        notice_sha256="2" * 64,
        code="0.1.0+gtest",
    )
    envelope = sign_statement(
        make_statement(B.BOM_PREDICATE, document, B.subjects_for_files(files)), signing_key
    )
    out.mkdir(parents=True)
    (out / "bom.dsse.json").write_bytes(canonical_json(envelope) + b"\n")
    (out / "train-keys.txt").write_text("".join(k + "\n" for k in sorted(set(train_keys))))


@pytest.fixture(scope="module")
def world(tmp_path_factory, teacher_url):
    from ratchet_stats.keys import generate_private_key, public_key_b64

    with running_gateway(tmp_path_factory.mktemp("proofs"), teacher_url) as g:
        client = openai.OpenAI(base_url=g.url + "/v1", api_key=API_KEY, max_retries=0, timeout=20)
        sent = [(b, h, _send(client, b, h)) for b, h in _bodies()]
        other = openai.OpenAI(base_url=g.url + "/v1", api_key=OTHER_KEY, max_retries=0, timeout=20)
        from ratchet_core.workloads import get_workload

        ex = get_workload("tickets").generate(1, seed=99)[0]
        other_body = {"model": "ratchet", "messages": ex.messages, "metadata": {"ratchet_task": "tickets"}}
        other_rid = _send(other, other_body, {})
        g.drain()
        days = {r["day"] for r in sealed_rows(g.settings.lake_root)}
        keys: dict[str, str] = {}
        for day in days:
            keys.update(_night_keys(g.settings, day))
        assert len(keys) == len(sent) + 1, "every request is a distinct teacher-labelled example"
        items = [Sent(b, h, rid, keys[rid]) for b, h, rid in sent]
        trained, absent = items[::2], items[1::2]
        signing = generate_private_key()
        bom_dir = Path(g.settings.artifacts_root) / "boms" / VERSION
        _write_bom(bom_dir, [s.night_key for s in trained] + [_filler(i) for i in range(40)], signing)
        yield World(
            g.url,
            bom_dir,
            public_key_b64(signing.public_key()),
            trained,
            absent,
            Sent(other_body, {}, other_rid, keys[other_rid]),
            str(g.settings.lake_root),
        )


def _verify(
    world: World, proof: dict, tmp_path: Path, expect: str | None = None
) -> subprocess.CompletedProcess:
    """`ratchet verify proof` (the auditor's argparse entry point, in process)."""
    import contextlib
    import io

    from ratchet_stats.cli import main

    path = tmp_path / "proof.json"
    path.write_text(json.dumps(proof))
    args = ["verify", "proof", "--bom", str(world.bom_dir / "bom.dsse.json"), "--proof", str(path)]
    args += ["--key", world.pub] + (["--expect", expect] if expect else [])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _post(world: World, sent: Sent, version: str = VERSION, headers: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{world.url}/ratchet/proofs/{version}",
        json={"request_id": sent.request_id},
        headers={**AUTH, **(headers or {})},
        timeout=20,
    )


def test_trained_requests_get_membership_proofs_that_verify(world, tmp_path):
    for sent in world.trained:
        r = _post(world, sent)
        assert r.status_code == 200, r.text
        proof = r.json()
        assert proof["key"] == sent.night_key  # the night's key, not the route's own computation
        assert proof["kind"] == "membership"
        res = _verify(world, proof, tmp_path, "member")
        assert res.returncode == 0, res.stdout + res.stderr
        assert _verify(world, proof, tmp_path, "absent").returncode == 1


def test_untrained_requests_get_non_membership_proofs_that_verify(world, tmp_path):
    for sent in world.absent:
        proof = _post(world, sent).json()
        assert proof["key"] == sent.night_key
        assert proof["kind"] == "non-membership"
        res = _verify(world, proof, tmp_path, "absent")
        assert res.returncode == 0, res.stdout + res.stderr


def _not_found(r: httpx.Response) -> dict:
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert err["code"] == "request_not_found"
    return err


def test_proofs_only_for_the_callers_own_requests(world):
    """Another client's request id is the same 404 as an unknown one: the route cannot be used to probe other
    clients' requests."""
    theirs = _post(world, world.other_client)  # app1 asks about app2's request
    unknown = httpx.get(f"{world.url}/ratchet/proofs/{VERSION}/req_doesnotexist", headers=AUTH, timeout=20)
    errors = [_not_found(r) for r in (theirs, unknown)]
    assert errors[0] == errors[1]  # one answer for both
    mine = _post(world, world.other_client, headers={"Authorization": f"Bearer {OTHER_KEY}"})
    assert mine.status_code == 200 and mine.json()["key"] == world.other_client.night_key


def test_a_chat_body_gets_no_proof(world):
    """By body, a client that once replayed another client's exact body would learn whether that client's request
    was trained on: the route takes request ids only."""
    theirs = world.trained[0].body
    r = httpx.post(f"{world.url}/ratchet/proofs/{VERSION}", json=theirs, headers=OTHER, timeout=20)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (
        err["code"] == "proof_by_request_id"
        and err["param"] == "request_id"
        and "request_id" in err["message"]
    )


def test_a_request_after_the_training_cut_gets_no_proof(world, tmp_path):
    """A replay of a trained body, sent after the version's training data was collected, shares the trained
    example's key: it gets no proof (neither member nor absent), and neither does any request after the cut."""
    from ratchet_stats.keys import generate_private_key

    signing = generate_private_key()
    day = {r["day"] for r in sealed_rows(world.lake_root)}.pop()
    before = (datetime.date.fromisoformat(day) - datetime.timedelta(days=1)).isoformat()
    for version, cut in (("v2-cutbefore", before), ("v2-cutthen", day)):
        out = world.bom_dir.parent / version
        _write_bom(out, [world.trained[0].night_key], signing, f"training-set day={cut}")
    replay = openai.OpenAI(base_url=world.url + "/v1", api_key=OTHER_KEY, max_retries=0, timeout=20)
    rid = _send(replay, world.trained[0].body, world.trained[0].headers)
    httpx.get(f"{world.url}/healthz")
    late = httpx.get(f"{world.url}/ratchet/proofs/v2-cutbefore/{rid}", headers=OTHER, timeout=20)
    assert late.status_code == 404 and late.json()["error"]["code"] == "request_after_training", late.text
    assert "key" not in late.text
    # within the window the replayer's own request was part of the training data: its proof is its own
    within = httpx.get(f"{world.url}/ratchet/proofs/v2-cutthen/{rid}", headers=OTHER, timeout=20)
    assert within.status_code == 200 and within.json()["kind"] == "membership"


def test_ownership_is_found_in_the_lake_too(world):
    """Rows another replica sealed (this replica's ledger does not hold them) are found in the lake."""
    from ratchet_gateway.proofs import find_request_row

    class NoLocalLedger:  # a replica that holds none of these rows: only the lake can answer
        lake_root = world.lake_root

        def find_rows(self, column, values, columns, client=None):
            return []

    for sent in world.trained[:2]:
        row = find_request_row(NoLocalLedger(), sent.request_id)
        assert row is not None and row.client == "app1"
    assert find_request_row(NoLocalLedger(), "req_doesnotexist") is None


def test_forged_proofs_fail(world, tmp_path):
    member = _post(world, world.trained[0]).json()
    absent = _post(world, world.absent[0]).json()
    forgeries = []
    f = copy.deepcopy(member)  # claim an untrained example was trained on
    f["key"] = absent["key"]
    forgeries.append(f)
    f = copy.deepcopy(absent)  # claim a trained example was not: its neighbours do not bracket it
    f["key"] = member["key"]
    forgeries.append(f)
    f = copy.deepcopy(member)  # a tampered audit path
    f["audit_path"][0] = "00" * 32
    forgeries.append(f)
    f = copy.deepcopy(absent)  # non-adjacent neighbours
    side = "predecessor" if f["predecessor"] else "successor"
    f[side]["index"] = (f[side]["index"] + 2) % f["size"]
    forgeries.append(f)
    for forged in forgeries:
        res = _verify(world, forged, tmp_path)
        assert res.returncode == 1, (forged, res.stdout)


def test_the_ratchet_cli_accepts_the_saved_response(world, tmp_path):
    r = _post(world, world.trained[1])
    path = tmp_path / "proof.json"
    path.write_bytes(r.content)  # the response body, saved as is
    bom = tmp_path / "bom.dsse.json"
    got = httpx.get(f"{world.url}/ratchet/boms/{VERSION}", headers=AUTH, timeout=20)
    assert got.status_code == 200 and got.content == (world.bom_dir / "bom.dsse.json").read_bytes()
    bom.write_bytes(got.content)
    res = subprocess.run(
        [sys.executable, "-m", "ratchet_cli.main", "verify", "proof", "--bom", str(bom), "--proof", str(path),
         "--key", world.pub, "--expect", "member"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def test_proof_by_request_id_for_own_requests_only(world):
    for sent, kind in ((world.trained[2], "membership"), (world.absent[2], "non-membership")):
        r = httpx.get(f"{world.url}/ratchet/proofs/{VERSION}/{sent.request_id}", headers=AUTH, timeout=20)
        assert r.status_code == 200, r.text
        assert r.json()["key"] == sent.night_key and r.json()["kind"] == kind
        assert r.json() == _post(world, sent).json()  # GET and POST {"request_id"} answer alike
    theirs = httpx.get(f"{world.url}/ratchet/proofs/{VERSION}/{world.other_client.request_id}", headers=AUTH)
    missing = httpx.get(f"{world.url}/ratchet/proofs/{VERSION}/req_doesnotexist", headers=AUTH)
    for r in (theirs, missing):
        assert r.status_code == 404
        assert r.json()["error"]["code"] == "request_not_found"
    assert theirs.json()["error"]["message"].replace(world.other_client.request_id, "X") == missing.json()[
        "error"
    ]["message"].replace("req_doesnotexist", "X")
    mine = httpx.get(
        f"{world.url}/ratchet/proofs/{VERSION}/{world.other_client.request_id}",
        headers={"Authorization": f"Bearer {OTHER_KEY}"},
    )
    assert mine.status_code == 200 and mine.json()["key"] == world.other_client.night_key


def test_errors_say_what_to_do(world):
    sent = world.trained[0]
    r = _post(world, sent, version="v9-notbuilt")
    assert r.status_code == 404
    err = r.json()["error"]
    assert err["type"] == "not_found_error" and "no BOM" in err["message"] and "v9-notbuilt" in err["message"]
    bad = httpx.post(f"{world.url}/ratchet/proofs/{VERSION}", content=b"{not json", headers=AUTH)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    no_id = httpx.post(f"{world.url}/ratchet/proofs/{VERSION}", json={"model": "ratchet"}, headers=AUTH)
    assert no_id.status_code == 400 and "request_id" in no_id.json()["error"]["message"]
    assert httpx.post(f"{world.url}/ratchet/proofs/{VERSION}", json=sent.body).status_code == 401
    wrong = httpx.post(
        f"{world.url}/ratchet/proofs/{VERSION}", json=sent.body, headers={"Authorization": "Bearer sk-nope"}
    )
    assert wrong.status_code == 401 and "sk-nope" not in wrong.text
    assert httpx.post(f"{world.url}/ratchet/proofs/..", json=sent.body, headers=AUTH).status_code in (
        400,
        404,
    )
    assert httpx.post(f"{world.url}/ratchet/proofs/v1%20x", json=sent.body, headers=AUTH).status_code == 400
    assert httpx.get(f"{world.url}/ratchet/boms/v9-notbuilt", headers=AUTH).status_code == 404
