"""The adapter's ML-BOM format, and its verification: DSSE signature, in-toto Statement, CycloneDX 1.6, NOTICE, files.

The BOM is a CycloneDX 1.6 document (``bomFormat`` "CycloneDX", ``specVersion`` "1.6") carried as the predicate of
an in-toto Statement v1 (predicateType ``https://cyclonedx.org/bom``) in a DSSE envelope. The Statement's subjects
are the adapter's files (name = file name, digest = sha256). Ratchet's BOM has these components (``bom-ref``):

- ``adapter:<version>`` (``machine-learning-model``): the LoRA adapter; ``hashes`` = the adapter digest
  (``ratchet_stats.certificate.adapter_digest``); ``modelCard`` with the certificate's per-task precision, lower
  bound and LTT threshold; properties ``ratchet:file:<name>`` (file sha256), ``ratchet:hyperparameter:<name>``,
  ``ratchet:certificate:sha256``; and, in BOMs of adapters trained since nights warm-start, how the weights started:
  ``ratchet:start:mode`` (``warm`` | ``cold``), ``ratchet:start:reason``, and for a warm start the parent adapter
  ``ratchet:start:parent_version`` and ``ratchet:start:parent_sha256`` (also the component's
  ``pedigree.ancestors``: the parent's bom-ref, version and SHA-256 digest), ``ratchet:start:new_rows``,
  ``ratchet:start:replay_rows`` and ``ratchet:start:replay_rule``. A BOM without them (older) verifies as before;
- ``base:<name>`` (``machine-learning-model``): the base model with its license and the sha256 of every weight,
  config and tokenizer file (``ratchet:file:<name>``), the sha256 of its chat template
  (``ratchet:base:chat_template_sha256``) and the vLLM tool parser that template needs (``ratchet:base:tool_parser``,
  "" for none);
- ``data:train`` and ``data:golden`` (``data``): Merkle commitments as properties ``ratchet:merkle:key_root``,
  ``ratchet:merkle:key_count``, ``ratchet:merkle:row_root``, ``ratchet:merkle:row_count``
  (``ratchet_stats.commitment``), plus the data source's license; where their rows' label sources are recorded,
  ``ratchet:labels:<source>`` (rows per source: teacher, people, import, summing to the row count) and, for the
  training set, ``ratchet:labels:root`` / ``ratchet:labels:count``: the root of the tree whose leaves are each
  row's ``<example key> <label source>`` in file order;
- ``teacher`` (a ``service``): the teacher model that labelled the data;
- document properties ``ratchet:notice:sha256`` (NOTICE.md) and ``ratchet:code:version``.

Checks run in order and stop at the first failure, naming it: ``signature`` (via ``ratchet_stats.dsse``, before
the payload is parsed), ``statement``, ``cyclonedx``, ``components``, ``subjects``, ``notice``, ``files``.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ratchet_stats.certificate import adapter_digest
from ratchet_stats.dsse import VerificationError, verify_statement
from ratchet_stats.evidence import EvidenceError

BOM_PREDICATE = "https://cyclonedx.org/bom"
SPEC_VERSION = "1.6"
TRAIN_REF = "data:train"
GOLDEN_REF = "data:golden"
TEACHER_REF = "teacher"
ADAPTER_REF_PREFIX = "adapter:"
BASE_REF_PREFIX = "base:"
P_FILE = "ratchet:file:"
P_BASE = "ratchet:base:"
P_HYPER = "ratchet:hyperparameter:"
P_KEY_ROOT = "ratchet:merkle:key_root"
P_KEY_COUNT = "ratchet:merkle:key_count"
P_ROW_ROOT = "ratchet:merkle:row_root"
P_ROW_COUNT = "ratchet:merkle:row_count"
P_NOTICE = "ratchet:notice:sha256"
P_CODE = "ratchet:code:version"
P_CERT = "ratchet:certificate:sha256"
P_VERSION = "ratchet:version"
P_START = "ratchet:start:"
P_START_MODE = "ratchet:start:mode"
P_PARENT_VERSION = "ratchet:start:parent_version"
P_PARENT_SHA256 = "ratchet:start:parent_sha256"
START_MODES = ("warm", "cold")
P_LABELS = "ratchet:labels:"  # + teacher | people | import: rows per label source
P_LABEL_ROOT = "ratchet:labels:root"
P_LABEL_COUNT = "ratchet:labels:count"


class BomError(EvidenceError):
    """The BOM failed a check; ``check`` names it (signature, statement, cyclonedx, components, ...)."""


@dataclass(frozen=True)
class DataCommitment:
    """What the BOM says about one data set: sorted-key tree and row tree (root hex + leaf count)."""

    key_root: str
    key_count: int
    row_root: str
    row_count: int


@dataclass
class BomReport:
    """A verified BOM and what was checked."""

    version: str
    adapter_sha256: str
    train: DataCommitment
    golden: DataCommitment
    bom: dict[str, Any]
    keyid: str = ""
    checks: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": True,
            "version": self.version,
            "adapter_sha256": self.adapter_sha256,
            "train": self.train.__dict__,
            "golden": self.golden.__dict__,
            "checks": self.checks,
        }


def properties(obj: Mapping[str, Any]) -> dict[str, str]:
    """A CycloneDX ``properties`` array as a dict (name -> value)."""
    return {
        p["name"]: p["value"] for p in obj.get("properties") or [] if isinstance(p, Mapping) and "name" in p
    }


def file_hashes(obj: Mapping[str, Any]) -> dict[str, str]:
    """The ``ratchet:file:<name>`` properties of a component: {file name: sha256}."""
    return {k.removeprefix(P_FILE): v for k, v in properties(obj).items() if k.startswith(P_FILE)}


def components_by_ref(bom: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("bom-ref", ""): c for c in bom.get("components") or [] if isinstance(c, Mapping)}


def _data_commitment(component: Mapping[str, Any] | None, ref: str) -> DataCommitment:
    if component is None:
        raise BomError("components", f"no data component {ref!r}")
    props = properties(component)
    try:
        return DataCommitment(
            key_root=props[P_KEY_ROOT],
            key_count=int(props[P_KEY_COUNT]),
            row_root=props[P_ROW_ROOT],
            row_count=int(props[P_ROW_COUNT]),
        )
    except (KeyError, ValueError) as exc:
        raise BomError("components", f"{ref} lacks its Merkle commitment property {exc}") from exc


def payload_unverified(envelope: Mapping[str, Any] | str | bytes) -> dict[str, Any]:
    """The Statement inside an envelope WITHOUT checking its signature (only for `verify proof` without --key,
    which says so loudly)."""
    env = json.loads(envelope) if isinstance(envelope, str | bytes) else envelope
    return json.loads(base64.b64decode(env["payload"]))


def check_bom_document(bom: Any) -> tuple[str, str, DataCommitment, DataCommitment]:
    """Shape checks on the CycloneDX document; returns (version, adapter sha256, train, golden)."""
    if not isinstance(bom, Mapping):
        raise BomError("cyclonedx", "the predicate is not a JSON object")
    if bom.get("bomFormat") != "CycloneDX" or bom.get("specVersion") != SPEC_VERSION:
        raise BomError(
            "cyclonedx",
            f"bomFormat/specVersion are {bom.get('bomFormat')!r}/{bom.get('specVersion')!r}, expected CycloneDX/1.6",
        )
    comps = components_by_ref(bom)
    adapters = [c for r, c in comps.items() if r.startswith(ADAPTER_REF_PREFIX)]
    bases = [c for r, c in comps.items() if r.startswith(BASE_REF_PREFIX)]
    if len(adapters) != 1 or adapters[0].get("type") != "machine-learning-model":
        raise BomError(
            "components", "expected exactly one machine-learning-model component 'adapter:<version>'"
        )
    adapter = adapters[0]
    if "modelCard" not in adapter:
        raise BomError("components", "the adapter component has no modelCard")
    if len(bases) != 1 or not file_hashes(bases[0]) or not bases[0].get("licenses"):
        raise BomError("components", "expected one base model component with file hashes and a license")
    files = file_hashes(adapter)
    if not files:
        raise BomError("components", "the adapter component lists no file hashes")
    hashes = {h.get("alg"): h.get("content") for h in adapter.get("hashes") or []}
    digest = hashes.get("SHA-256", "")
    if digest != adapter_digest(files):
        raise BomError("components", "the adapter digest does not match its listed file hashes")
    props = properties(adapter)
    if not any(k.startswith(P_HYPER) for k in props):
        raise BomError("components", "the adapter component lists no hyperparameters")
    _check_start(adapter, props)
    for ref in (TRAIN_REF, GOLDEN_REF):
        if not (comps.get(ref) or {}).get("licenses"):
            raise BomError("components", f"{ref} has no license")
        _check_labels(comps.get(ref) or {}, ref)
    if not any(s.get("bom-ref") == TEACHER_REF for s in bom.get("services") or []):
        raise BomError("components", "no teacher service")
    doc = properties(bom)
    if P_CODE not in doc or P_NOTICE not in doc:
        raise BomError("components", f"document properties {P_CODE} and {P_NOTICE} are required")
    version = adapter.get("version", "")
    return (
        version,
        digest,
        _data_commitment(comps.get(TRAIN_REF), TRAIN_REF),
        _data_commitment(comps.get(GOLDEN_REF), GOLDEN_REF),
    )


def _check_start(adapter: Mapping[str, Any], props: Mapping[str, str]) -> None:
    """The start properties, when present: a known mode, and for a warm start a parent named alike in the
    properties and the pedigree (version and a SHA-256 digest)."""
    mode = props.get(P_START_MODE)
    if mode is None:
        if any(k.startswith(P_START) for k in props):
            raise BomError("components", f"start properties without {P_START_MODE}")
        return
    if mode not in START_MODES:
        raise BomError("components", f"{P_START_MODE} is {mode!r}, expected one of {', '.join(START_MODES)}")
    ancestors = (adapter.get("pedigree") or {}).get("ancestors") or []
    if mode == "cold":
        if ancestors or P_PARENT_VERSION in props:
            raise BomError("components", "a cold-started adapter names a parent")
        return
    version, sha = props.get(P_PARENT_VERSION, ""), props.get(P_PARENT_SHA256, "")
    if not version or len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
        raise BomError(
            "components", f"a warm-started adapter needs {P_PARENT_VERSION} and a hex {P_PARENT_SHA256}"
        )
    named = [
        a
        for a in ancestors
        if isinstance(a, Mapping)
        and a.get("version") == version
        and {h.get("alg"): h.get("content") for h in a.get("hashes") or []}.get("SHA-256") == sha
    ]
    if len(ancestors) != 1 or not named:
        raise BomError("components", "the adapter's pedigree does not name its parent as its properties do")


def _check_labels(component: Mapping[str, Any], ref: str) -> None:
    """The label-source properties of a data component, when present, account for every row."""
    props = properties(component)
    sources = {
        k: v for k, v in props.items() if k.startswith(P_LABELS) and k not in (P_LABEL_ROOT, P_LABEL_COUNT)
    }
    if not sources and P_LABEL_COUNT not in props:
        return  # a BOM written before label sources were recorded
    try:
        rows = int(props[P_ROW_COUNT])
        counted = sum(int(v) for v in sources.values())
        labelled = int(props.get(P_LABEL_COUNT, rows))
    except (KeyError, ValueError) as exc:
        raise BomError("components", f"{ref}: a label-source property is not a count ({exc})") from exc
    if counted != rows or labelled != rows:
        raise BomError(
            "components",
            f"{ref}: label sources account for {counted} rows (tree: {labelled}), the set has {rows}",
        )


def notice_requirements(bom: Mapping[str, Any]) -> list[str]:
    """Strings NOTICE.md must contain: each license named in the BOM and each data source's name."""
    needs: list[str] = []
    for comp in bom.get("components") or []:
        ref = comp.get("bom-ref", "")
        if ref.startswith(BASE_REF_PREFIX) or comp.get("type") == "data":
            needs.append(comp.get("name", ""))
            for lic in comp.get("licenses") or []:
                inner = lic.get("license") or {}
                needs.append(inner.get("id") or inner.get("name") or lic.get("expression", ""))
    return [n for n in dict.fromkeys(needs) if n]


def verify_bom(
    envelope: Mapping[str, Any] | str | bytes,
    public_keys: Any,
    notice: bytes | None = None,
    adapter_dir: str | Path | None = None,
) -> BomReport:
    """Verify a BOM envelope; with ``notice`` (NOTICE.md bytes) and/or ``adapter_dir`` check those too.

    Raises BomError naming the failed check; returns a BomReport on success.
    """
    try:
        statement = verify_statement(envelope, public_keys, predicate_type=BOM_PREDICATE)
    except VerificationError as exc:
        raise BomError(
            "signature" if exc.check in ("signature", "keyid", "envelope") else "statement", str(exc)
        ) from exc
    checks = ["signature", "statement"]
    bom = statement.get("predicate")
    version, digest, train, golden = check_bom_document(bom)
    checks += ["cyclonedx", "components"]
    files = file_hashes(components_by_ref(bom)[f"{ADAPTER_REF_PREFIX}{version}"])
    subjects = {s.get("name"): (s.get("digest") or {}).get("sha256") for s in statement.get("subject") or []}
    if subjects != files:
        raise BomError("subjects", "the Statement's subjects differ from the adapter files listed in the BOM")
    checks.append("subjects")
    if notice is not None:
        want = properties(bom)[P_NOTICE]
        got = hashlib.sha256(notice).hexdigest()
        if got != want:
            raise BomError(
                "notice", f"NOTICE sha256 is {got}, the BOM records {want}: not this adapter's NOTICE"
            )
        text = notice.decode("utf-8", "replace")
        missing = [n for n in notice_requirements(bom) if n not in text]
        if missing:
            raise BomError("notice", f"NOTICE does not mention {missing}")
        checks.append("notice")
    if adapter_dir is not None:
        root = Path(adapter_dir)
        for name, want in sorted(files.items()):
            path = root / name
            if not path.is_file():
                raise BomError("files", f"{path} is missing (the BOM lists it)")
            got = hashlib.sha256(path.read_bytes()).hexdigest()
            if got != want:
                raise BomError("files", f"{path} has sha256 {got}, the BOM records {want}")
        checks.append("files")
    return BomReport(version, digest, train, golden, dict(bom), checks=checks)


def metrics_from_bom(bom: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The adapter model card's performance metrics (for display)."""
    for comp in bom.get("components") or []:
        if str(comp.get("bom-ref", "")).startswith(ADAPTER_REF_PREFIX):
            card = comp.get("modelCard") or {}
            return list((card.get("quantitativeAnalysis") or {}).get("performanceMetrics") or [])
    return []


def subjects_for_files(files: Mapping[str, str]) -> list[dict[str, Any]]:
    """in-toto subjects for adapter files {name: sha256}, sorted by name."""
    return [{"name": n, "digest": {"sha256": d}} for n, d in sorted(files.items())]
