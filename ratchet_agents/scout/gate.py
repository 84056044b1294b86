"""A small client of the effect gate's HTTP API (``ratchet effects serve``): begin, report, fail, show."""

from __future__ import annotations

from typing import Any

import httpx


class GateError(RuntimeError):
    """The effect gate answered with an error (its message says what to do)."""


class GateClient:
    def __init__(self, base_url: str, api_key: str, timeout: float = 30.0) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers={"Authorization": f"Bearer {api_key}"}, timeout=timeout
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise GateError(f"effect gate at {self._http.base_url} unreachable: {exc}") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise GateError(f"effect gate {response.status_code}: {message}")
        return response.json()

    def begin(self, effect_type: str, key: str, fingerprint: str, **fields: Any) -> dict[str, Any]:
        body = {"effect_type": effect_type, "key": key, "fingerprint": fingerprint, **fields}
        return self._call("POST", "/effects/begin", json=body)

    def report(self, token: str, result: dict[str, Any], cost_usd: float | None = None) -> None:
        self._call("POST", "/effects/report", json={"token": token, "result": result, "cost_usd": cost_usd})

    def fail(self, token: str, error: str, cost_usd: float | None = None) -> None:
        self._call("POST", "/effects/fail", json={"token": token, "error": error, "cost_usd": cost_usd})

    def show(self, effect_type: str, key: str) -> dict[str, Any]:
        return self._call("GET", f"/effects/{effect_type}/{key}")

    def rules(self, effect_type: str) -> dict[str, Any]:
        return self._call("GET", f"/rules/{effect_type}")

    def close(self) -> None:
        self._http.close()
