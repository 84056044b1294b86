"""Adapters kept loaded: every student endpoint holds exactly the versions the current release manifest serves.

The desired set (:func:`desired_versions`) follows from the manifest alone: per task, the release's own version
when it is in shadow, canary or live, and ``previous_live`` (it serves the rest mid-rollout and is where a rollback
goes). :func:`reconcile_endpoint` converges one endpoint speaking vLLM's runtime LoRA API to it:

- ``GET /v1/models`` says what is loaded now (adapters are the entries with a ``parent``);
- a desired version that is missing is loaded (``POST /v1/load_lora_adapter {lora_name, lora_path}``) from
  ``<artifacts>/adapters/<version>``; into a vLLM endpoint (one whose ``/v1/models`` entries are not owned by
  ``ratchet``, Ratchet's student server) only once ``vllm_compat.vllm_compatible`` says vLLM can load it onto
  the configured base (``RATCHET_STUDENT_BASE_MODEL``) within ``RATCHET_STUDENT_MAX_LORA_RANK``, else it stays
  missing with the reasons (a demo-base adapter, say, carries ``modules_to_save``); then through the effect ledger (type ``adapter.load``, policy retry). The key is
  ``<endpoint>|<version>#<n>``: ``n`` counts the loads that already happened, so an endpoint that lost the
  adapter (restarted, or vLLM evicted it) is a new target and the ledger never stops a needed reload, while two
  reconcilers that see the same absence share one key and load once. The fingerprint is the adapter's digest
  (``ratchet_stats.certificate.adapter_digest``); a digest other than the first load's under the same name is
  refused (one name never means two adapters on one endpoint). The result records the adapter as its name in the
  artifacts tree (``adapters/<version>``), or the store URL the endpoint was given (``ratchet_core.layout``,
  "Stored names");
- a loaded adapter that is not desired and that the versions registry calls retired, rolled back or rejected on
  every task is unloaded (``POST /v1/unload_lora_adapter``). Anything else loaded (a candidate, a version being
  evaluated tonight, one an operator loaded by hand) is left alone and reported as ``extra``.

The report says what was loaded, reloaded and unloaded, and the drift left: desired versions still missing (and
why), retired versions still loaded. The Dagster sensor ``adapter_reconciler`` runs it for every configured
endpoint every 30 s (``ratchet_assets.defs.release_sensors``); the gateway meanwhile falls back to the teacher
when its student endpoint lacks a version.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ratchet_core import manifest as mf
from ratchet_stats.certificate import adapter_dir_digest

log = logging.getLogger(__name__)

EFFECT_TYPE = "adapter.load"
RETIRED_STATUSES = ("retired", "rolled_back", "superseded", "rejected")


def desired_versions(manifest: mf.Manifest) -> dict[str, list[str]]:
    """version -> tasks it must be loaded for (the manifest's shadow/canary/live versions and previous live)."""
    out: dict[str, set[str]] = {}
    for task, rel in manifest.tasks.items():
        if rel.stage in ("shadow", "canary", "live") and rel.version:
            out.setdefault(rel.version, set()).add(task)
        if rel.previous_live:
            out.setdefault(rel.previous_live, set()).add(task)
    return {v: sorted(t) for v, t in sorted(out.items())}


@dataclass
class EndpointReport:
    endpoint: str
    desired: list[str] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)  # loaded by this pass for the first time on this endpoint
    reloaded: list[str] = field(default_factory=list)  # loaded again (the endpoint had lost it: a restart)
    unloaded: list[str] = field(default_factory=list)
    missing: dict[str, str] = field(default_factory=dict)  # desired, still not loaded: why
    stale: list[str] = field(default_factory=list)  # retired but still loaded (unload failed)
    extra: list[str] = field(default_factory=list)  # loaded, not desired, not retired: left alone
    error: str = ""  # the endpoint could not be asked at all

    @property
    def acted(self) -> bool:
        return bool(self.loaded or self.reloaded or self.unloaded)

    @property
    def drift(self) -> int:
        """Versions not as the manifest wants them after this pass."""
        return len(self.missing) + len(self.stale)

    def summary(self) -> str:
        if self.error:
            return f"{self.endpoint}: {self.error}"
        parts = []
        for name, items in (
            ("loaded", self.loaded),
            ("reloaded", self.reloaded),
            ("unloaded", self.unloaded),
        ):
            if items:
                parts.append(f"{name} {', '.join(items)}")
        if self.missing:
            parts.append("MISSING " + "; ".join(f"{v} ({why})" for v, why in self.missing.items()))
        if self.stale:
            parts.append(f"retired but still loaded {', '.join(self.stale)}")
        if not parts:
            held = ", ".join(self.desired) or "no adapter"
            parts.append(f"holds what the manifest serves ({held})")
        if self.extra:
            parts.append(f"also loaded: {', '.join(self.extra)}")
        return f"{self.endpoint}: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Endpoint:
    def __init__(self, base_url: str, api_key: str = "", timeout_s: float = 300.0):
        import httpx

        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(headers=headers, timeout=timeout_s)
        self.is_vllm = False  # known after adapters(): its models are not owned by Ratchet's student server

    def adapters(self) -> set[str]:
        resp = self.client.get(f"{self.base_url}/models", timeout=10.0)
        if resp.status_code != 200:
            raise RuntimeError(f"GET /models answered HTTP {resp.status_code}: {resp.text[:200]}")
        models = resp.json().get("data", [])
        self.is_vllm = any(m.get("owned_by") != "ratchet" for m in models)
        return {m.get("id", "") for m in models if m.get("parent")}

    def load(self, name: str, path: str, digest: str = "") -> None:
        body = {"lora_name": name, "lora_path": path}
        if digest:  # Ratchet's student server checks a downloaded adapter against it; vLLM ignores it
            body["adapter_digest"] = digest
        resp = self.client.post(f"{self.base_url}/load_lora_adapter", json=body)
        if resp.status_code != 200 and not (resp.status_code == 400 and "already" in resp.text.lower()):
            raise RuntimeError(f"load_lora_adapter answered HTTP {resp.status_code}: {resp.text[:300]}")

    def unload(self, name: str) -> None:
        resp = self.client.post(f"{self.base_url}/unload_lora_adapter", json={"lora_name": name})
        if resp.status_code not in (200, 404):
            raise RuntimeError(f"unload_lora_adapter answered HTTP {resp.status_code}: {resp.text[:300]}")

    def close(self) -> None:
        self.client.close()


def _load(
    ep: _Endpoint,
    effects: Any,
    version: str,
    folder: Path,
    report: EndpointReport,
    location: str,
    stored: str,
) -> None:
    """Load `version` through the effect ledger under the next incarnation key (module docstring).

    `location`: what the endpoint is told to load (the local folder, or the store URL when it downloads);
    `stored`: what the ledger records (the folder's name in the artifacts tree, or that URL)."""
    digest = adapter_dir_digest(folder)
    base = f"{ep.base_url}|{version}"
    n = 1
    while (rec := effects.lookup(EFFECT_TYPE, f"{base}#{n}")) is not None and rec.status == "done":
        if rec.fingerprint != digest:
            report.missing[version] = (
                f"{ep.base_url} loaded another adapter named {version} before (digest {rec.fingerprint[:12]}, "
                f"now {digest[:12]}): version names must be unique"
            )
            return
        n += 1
    begin = effects.begin(EFFECT_TYPE, f"{base}#{n}", digest, lease_seconds=600)
    if begin.outcome != "execute":
        report.missing[version] = f"load #{n} is {begin.outcome} ({begin.detail or 'another reconciler'})"
        return
    try:
        ep.load(version, location, digest)
    except Exception as exc:
        effects.fail(begin.token, str(exc)[:500])
        report.missing[version] = str(exc)[:300]
        return
    effects.report(begin.token, {"endpoint": ep.base_url, "version": version, "path": stored, "load": n})
    (report.loaded if n == 1 else report.reloaded).append(version)


def reconcile_endpoint(
    base_url: str,
    api_key: str,
    desired: dict[str, list[str]],
    artifacts: str | Path,
    effects: Any,
    statuses: dict[str, set[str]],
    store: Any = None,
    from_store: bool = False,
    base: str | Path | None = None,
    max_rank: int = 32,
) -> EndpointReport:
    """Converge one endpoint to `desired` (version -> tasks); `statuses`: version -> its registry statuses.

    `store` (``ratchet_core.artifact_store.ArtifactStore``): an adapter the local artifacts cache lacks is fetched
    from it first (the cache may be a volume shared with vLLM, which loads local paths); with `from_store` the
    endpoint is given the store URL instead and downloads the adapter itself (Ratchet's student server).
    `base` (the base model folder the endpoint serves) and `max_rank` (its ``--max-lora-rank``): what an adapter
    must fit before it is loaded into a vLLM endpoint (``vllm_compat``)."""
    from ratchet_core.layout import ArtifactLayout

    layout = ArtifactLayout(artifacts)
    report = EndpointReport(base_url.rstrip("/"), desired=sorted(desired))
    ep = _Endpoint(base_url, api_key)
    try:
        try:
            have = ep.adapters()
        except Exception as exc:
            report.error = f"unreachable ({exc}); every desired version counts as missing"
            report.missing = {v: "endpoint unreachable" for v in desired}
            return report
        for version in sorted(set(desired) - have):
            folder = layout.adapter_dir(version)
            name = layout.name_of(folder)  # what the ledger records: the adapter's name in the artifacts tree
            if store is not None and not (folder / "adapter_config.json").is_file():
                store.fetch(name)
            if not (folder / "adapter_config.json").is_file():
                report.missing[version] = f"no adapter files at {folder}"
                continue
            if ep.is_vllm:
                fits = _vllm_fit(folder, base, max_rank)
                if not fits.ok:
                    report.missing[version] = str(fits)
                    continue
            if store is not None and from_store:
                url = store.uri(name)
                _load(ep, effects, version, folder, report, url, url)
            else:
                _load(ep, effects, version, folder, report, str(folder), name)
        for version in sorted(have - set(desired)):
            known = statuses.get(version, set())
            if known and known <= set(RETIRED_STATUSES):
                try:
                    ep.unload(version)
                    report.unloaded.append(version)
                except Exception as exc:
                    log.warning("could not unload %s from %s: %s", version, base_url, exc)
                    report.stale.append(version)
            else:
                report.extra.append(version)
    finally:
        ep.close()
    return report


def _vllm_fit(folder: Path, base: str | Path | None, max_rank: int):
    from ratchet_assets.release.vllm_compat import Compatibility, vllm_compatible

    if not base:
        return Compatibility(
            [
                "no base model is configured (RATCHET_STUDENT_BASE_MODEL): the adapter cannot be checked against "
                "the base the vLLM endpoint serves"
            ]
        )
    return vllm_compatible(folder, base, max_rank)


def registry_statuses(engine: Any) -> dict[str, set[str]]:
    """version -> the statuses the versions registry gives it (one per task)."""
    from ratchet_assets.release import registry

    out: dict[str, set[str]] = {}
    for row in registry.list_versions(engine):
        out.setdefault(row["version"], set()).add(row["status"])
    return out


def reconcile(
    engine: Any,
    public_keys: Any,
    endpoints: list[tuple[str, str]],
    artifacts: str | Path,
    store: Any = None,
    from_store: bool = False,
    base: str | Path | None = None,
    max_rank: int = 32,
) -> tuple[mf.Manifest, list[EndpointReport]]:
    """Every endpoint (base URL, API key) against the newest verified manifest; returns it and one report each
    (`base`, `max_rank`: :func:`reconcile_endpoint`)."""
    from ratchet_assets.effects import EffectLedger

    manifest, _ = mf.latest_verified(engine, public_keys)
    manifest = manifest or mf.Manifest.default()
    desired = desired_versions(manifest)
    statuses = registry_statuses(engine)
    effects = EffectLedger(engine)
    reports = [
        reconcile_endpoint(url, key, desired, artifacts, effects, statuses, store, from_store, base, max_rank)
        for url, key in endpoints
    ]
    return manifest, reports
