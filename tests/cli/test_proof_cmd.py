"""`ratchet proof key|make|disjoint`: the example key of a request body, and proofs from key lists."""

from __future__ import annotations

import hashlib
import json

from click.testing import CliRunner

from ratchet_cli.proof_cmd import proof
from ratchet_stats.commitment import verify_key_proof
from tests.evidence.auditor import key_of


def _independent_key(task, messages, tools=None, response_format=None) -> str:
    # canonical JSON by hand (sorted keys, no whitespace, UTF-8) of text without PII: redaction is a no-op
    doc = {"task": task, "messages": messages, "tools": tools, "response_format": response_format}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def test_proof_key_matches_the_documented_formula(tmp_path):
    messages = [
        {"role": "system", "content": "Label the ticket."},
        {"role": "user", "content": "My order is late"},
    ]
    body = {
        "model": "ratchet",
        "messages": messages,
        "metadata": {"ratchet_task": "tickets"},
        "temperature": 0,
    }
    path = tmp_path / "request.json"
    path.write_text(json.dumps(body))
    res = CliRunner().invoke(proof, ["key", "--body", str(path)])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == _independent_key("tickets", messages)
    # --task applies when the body has no metadata; sampling parameters never change the key
    del body["metadata"]
    body["temperature"] = 1.0
    path.write_text(json.dumps(body))
    res = CliRunner().invoke(proof, ["key", "--body", str(path), "--task", "tickets", "--json"])
    assert json.loads(res.output)["key"] == _independent_key("tickets", messages)


def test_proof_key_redacts_pii_first(tmp_path):
    a = {"messages": [{"role": "user", "content": "mail me at ann@example.com"}]}
    b = {"messages": [{"role": "user", "content": "mail me at ann@example.com"}], "user": "x"}
    for name, body in (("a", a), ("b", b)):
        (tmp_path / f"{name}.json").write_text(json.dumps(body))
    ka = CliRunner().invoke(proof, ["key", "--body", str(tmp_path / "a.json")]).output.strip()
    kb = CliRunner().invoke(proof, ["key", "--body", str(tmp_path / "b.json")]).output.strip()
    assert ka == kb
    assert ka != _independent_key("default", a["messages"])  # the raw e-mail is not what was hashed


def test_proof_make_and_disjoint_from_key_lists(tmp_path):
    train = tmp_path / "train-keys.txt"
    train.write_text("\n".join(key_of(i) for i in range(0, 40, 2)) + "\n")
    golden = tmp_path / "golden-keys.txt"
    golden.write_text("\n".join(key_of(i) for i in range(1, 10, 2)) + "\n")
    runner = CliRunner()
    res = runner.invoke(proof, ["make", "--keys", str(train), "--example-key", key_of(4)])
    assert res.exit_code == 0, res.output
    made = json.loads(res.output)
    assert verify_key_proof(made, made["root"], made["size"]) == (key_of(4), True)
    res = runner.invoke(proof, ["make", "--keys", str(train), "--example-key", key_of(5)])
    assert json.loads(res.output)["kind"] == "non-membership"
    res = runner.invoke(proof, ["disjoint", "--train-keys", str(train), "--golden-keys", str(golden)])
    assert res.exit_code == 0 and len(json.loads(res.output)["proofs"]) == 5
    golden.write_text(key_of(2) + "\n")
    res = runner.invoke(proof, ["disjoint", "--train-keys", str(train), "--golden-keys", str(golden)])
    assert res.exit_code != 0 and "golden key" in res.output
    res = runner.invoke(proof, ["make", "--keys", str(train), "--example-key", "nothex"])
    assert res.exit_code == 2 and "64 lowercase hex" in res.output
