"""Receipt/proof routes (own rows only) and a stream that breaks mid-way (recorded as truncated)."""

from __future__ import annotations

import hashlib
import json

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .conftest import API_KEY, OTHER_KEY, running_gateway, sealed_rows


def _rfc9162_root(leaves: list[bytes]) -> bytes:
    # Independent oracle: RFC 9162 section 2.1.1, recursive split at the largest power of two below n.
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _rfc9162_root(leaves[:k]) + _rfc9162_root(leaves[k:])).digest()


def test_receipt_and_proof_routes_show_only_own_rows(tmp_path, teacher_url):
    with running_gateway(tmp_path, teacher_url) as g:
        day = "2026-01-05"
        folder = tmp_path / "home" / "artifacts" / "receipts" / day
        auth = {"Authorization": f"Bearer {API_KEY}"}
        r = httpx.get(f"{g.url}/ratchet/receipts/{day}", headers=auth)
        assert r.status_code == 404 and "no receipt" in r.json()["error"]["message"]
        folder.mkdir(parents=True)
        leaves = [json.dumps({"request_id": f"req_{i}", "n": i}) for i in range(5)]
        clients = ["app1", "app2", "app1", "app2", "app1"]
        pq.write_table(
            pa.table(
                {
                    "index": list(range(5)),
                    "request_id": [f"req_{i}" for i in range(5)],
                    "client": clients,
                    "leaf": leaves,
                }
            ),
            folder / "rows.parquet",
        )
        (folder / "receipt.dsse.json").write_text(
            json.dumps({"payloadType": "x", "payload": "", "signatures": []})
        )
        mine = httpx.get(f"{g.url}/ratchet/receipts/{day}", headers=auth).json()
        assert [row["request_id"] for row in mine["rows"]] == ["req_0", "req_2", "req_4"]
        proof = httpx.get(f"{g.url}/ratchet/receipts/{day}/proof/req_2", headers=auth).json()
        root = _rfc9162_root([s.encode() for s in leaves])
        assert proof["root"] == root.hex() and proof["index"] == 2 and proof["size"] == 5
        from ratchet_stats.merkle import verify_inclusion

        assert verify_inclusion(
            proof["leaf"].encode(), 2, 5, [bytes.fromhex(h) for h in proof["proof"]], root
        )
        other = httpx.get(f"{g.url}/ratchet/receipts/{day}/proof/req_1", headers=auth)
        assert other.status_code == 404  # app2's request: not revealed to app1
        theirs = httpx.get(
            f"{g.url}/ratchet/receipts/{day}/proof/req_1", headers={"Authorization": f"Bearer {OTHER_KEY}"}
        )
        assert theirs.status_code == 200
        assert httpx.get(f"{g.url}/ratchet/receipts/{day}").status_code == 401


@pytest.fixture
def breaking_upstream():
    """An OpenAI-shaped upstream whose SSE stream dies after two chunks (connection dropped mid-body)."""
    from fastapi import FastAPI
    from starlette.responses import StreamingResponse

    from tests.serve import serve_in_thread

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat():
        async def gen():
            for word in ("Hello", " wor"):
                chunk = {
                    "id": "x",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "demo-teacher",
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                }
                yield ("data: " + json.dumps(chunk) + "\n\n").encode()
            raise RuntimeError("upstream died")

        return StreamingResponse(gen(), media_type="text/event-stream")

    with serve_in_thread(app) as url:
        yield url + "/v1"


def test_broken_stream_is_recorded_truncated(tmp_path, breaking_upstream):
    with running_gateway(tmp_path, breaking_upstream) as g:
        with httpx.stream(
            "POST",
            g.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {API_KEY}"},
            json={"model": "ratchet", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        ) as resp:
            rid = resp.headers["x-ratchet-request-id"]
            body = b"".join(resp.iter_bytes())
        assert b"Hello" in body and b"[DONE]" not in body and b'"error"' in body
        g.drain()
        (row,) = [r for r in sealed_rows(g.settings.lake_root) if r["request_id"] == rid]
        assert row["truncated"] is True and row["answer"] == "Hello wor"
