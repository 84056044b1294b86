"""Every path under the artifacts root, in one place: ``ArtifactLayout(root)``.

The night writes, and the gateway, the admin CLI, the simulator and the demo read, these files (D = YYYY-MM-DD,
V = an adapter version such as ``v3-1a2b3c4d``)::

    traffic/day=D/traffic.parquet, segments.json        the day's validated, deduplicated ledger rows
    examples/day=D/examples.parquet                      teacher-labelled examples, one per example key
    golden/registry.parquet (+ .registry.lock)           permanent key -> golden/train assignment (only grows)
    golden/day=D/golden.parquet, keys.txt, commitment.json   the golden set to date and its commitments
    train/day=D/train.jsonl, keys.txt, labels.txt, commitment.json   the training set, its rows' label sources
                                                         and its commitments
    adapters/V/                                          a trained LoRA adapter (PEFT files)
    adapters/day=D/adapter.json                          pointer: the version night D trained or reused
    adapters/.staging-<fingerprint>/                     a training run in progress (renamed to adapters/V/)
    certificates/V.dsse.json                             the signed evaluation certificate
    certificates/V.predicate.json                        ratchet sim: the certificate's predicate, unsigned
    boms/V/bom.dsse.json, NOTICE.md, certificate.dsse.json, train-keys.txt, golden-keys.txt, disjoint.proof.json
    receipts/D/receipt.dsse.json, rows.parquet, tree.bin the signed daily receipt, its leaves and stored tree
    receipts/D/clients.jsonl, estimates.jsonl            its client lines and per-task estimate lines (v2)
    receipts/D/pairs.jsonl                               its audit/shadow pair lines (v3)
    imports/<id>/examples.parquet, provenance.json       labelled rows brought in by ``ratchet import``

An adapter export (``ratchet admin export-adapter --out DIR``) is ``DIR/adapter/`` plus the BOM folder's files:
:class:`AdapterExport`.

Nothing else joins these names. Paths are computed from the root as a string (``root`` is kept as given), and every
join goes through :meth:`ArtifactLayout.path`. The root is always a local folder; at scale it is the working cache
of an object store (``RATCHET_ARTIFACTS_URL``, ``ratchet_core.artifact_store``): a layout given ``store=`` fetches an
item (a file, or a folder such as ``receipts/D``) the cache lacks in ``path()``, for readers. An URL root is refused.
The lake (``ratchet_core.lake``) is the other tree, with its own module; both name days ``day=YYYY-MM-DD``.

Stored names: a record that points into this tree (an adapter record's ``adapter_dir``, the versions registry's
``certificate_path``, an effect's result) stores the item's root-relative name (:meth:`ArtifactLayout.name_of`, e.g.
``adapters/v4-1a2b3c4d``), never an absolute path, and a reader joins it to the root it has now
(:meth:`ArtifactLayout.resolve`). So a home (or an artifacts folder) that is moved, or restored from a backup into
another folder, keeps working, and a cache on another machine reads the same records. Records written before names
were relative hold absolute paths (under the root of the home they were written in, which may have moved since):
``resolve`` reads such a path as the name that starts at its last component naming a kind of this tree
(``/old/home/artifacts/adapters/v4-1a2b3c4d`` is ``adapters/v4-1a2b3c4d``), so no migration step is needed; a
rerun rewrites the files that hold them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ratchet_core.lake import day_folder, is_url

TRAFFIC = "traffic"
EXAMPLES = "examples"
GOLDEN = "golden"
TRAIN = "train"
ADAPTERS = "adapters"
CERTIFICATES = "certificates"
BOMS = "boms"
RECEIPTS = "receipts"
IMPORTS = "imports"
# The top-level folders above: the first component of every stored name (module docstring, "Stored names").
KINDS = (TRAFFIC, EXAMPLES, GOLDEN, TRAIN, ADAPTERS, CERTIFICATES, BOMS, RECEIPTS, IMPORTS)

COMMITMENT_FILE = (
    "commitment.json"  # beside golden.parquet and train.jsonl (ratchet_assets.night.commitments)
)
KEYS_FILE = "keys.txt"  # sorted example keys, one a line

RECEIPT_ENVELOPE_FILE = "receipt.dsse.json"
RECEIPT_ROWS_FILE = "rows.parquet"
RECEIPT_TREE_FILE = "tree.bin"
RECEIPT_CLIENTS_FILE = "clients.jsonl"
RECEIPT_PAIRS_FILE = "pairs.jsonl"  # v3: the audit/shadow pair lines (ratchet_stats.receipt.v3.PAIRS_FILE)
RECEIPT_ESTIMATES_FILE = "estimates.jsonl"

BOM_FILE = "bom.dsse.json"
BOM_NOTICE_FILE = "NOTICE.md"
BOM_CERTIFICATE_FILE = "certificate.dsse.json"
BOM_TRAIN_KEYS_FILE = "train-keys.txt"
BOM_GOLDEN_KEYS_FILE = "golden-keys.txt"
BOM_DISJOINT_PROOF_FILE = "disjoint.proof.json"
# Everything the bom step writes beside an adapter, in the order an export copies them.
BOM_FILES = (
    BOM_FILE,
    BOM_NOTICE_FILE,
    BOM_CERTIFICATE_FILE,
    BOM_TRAIN_KEYS_FILE,
    BOM_GOLDEN_KEYS_FILE,
    BOM_DISJOINT_PROOF_FILE,
)
ADAPTER_CONFIG_FILE = "adapter_config.json"  # PEFT's: present in every complete adapter folder


class ArtifactLayout:
    """The artifacts tree under ``root`` (module docstring); every method returns a path, creates nothing."""

    def __init__(self, root: str | os.PathLike, store: Any = None):
        self.root = str(root)
        self.store = store  # an ArtifactStore whose cache is root, or None (a plain folder)
        if is_url(self.root):
            raise ValueError(
                f"artifacts root {self.root!r} is an URL: RATCHET_ARTIFACTS is the local folder (or cache); "
                "put an object store in RATCHET_ARTIFACTS_URL (ratchet_core.artifact_store)"
            )

    def __repr__(self) -> str:
        return f"ArtifactLayout({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ArtifactLayout) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    def path(self, rel: str = "") -> Path:
        """The path of a root-relative, "/"-separated name: the one join under the root.

        With a store, an item (two or more components: a file or a day's/version's folder) the cache lacks is
        fetched first; kind folders and the root (listings) are not."""
        path = Path(self.root) / rel if rel else Path(self.root)
        if self.store is not None and "/" in rel.strip("/") and not path.exists():
            self.store.fetch(rel)
        return path

    def name_of(self, path: str | os.PathLike) -> str:
        """The name a record stores for ``path``, a file or folder under the root: root-relative, "/"-separated
        (``adapters/v4-1a2b3c4d``). A path outside the root is refused: it would not move with the tree."""
        try:
            rel = Path(path).relative_to(self.root)
        except ValueError:
            raise ValueError(
                f"{path} is not under the artifacts root {self.root}: a record names only what this tree holds"
            ) from None
        return rel.as_posix()

    def resolve(self, stored: str | os.PathLike) -> Path:
        """The path under this root of a name a record stored (module docstring, "Stored names").

        A name (``adapters/v4-1a2b3c4d``) is joined to the root, through :meth:`path` (so a store fetches what the
        cache lacks). An absolute path from a record written before names were relative is read as the name that
        starts at its last component naming a kind (:data:`KINDS`): the old home's root is whatever came before.
        An absolute path with no such component names nothing in this tree and is returned as it is."""
        text = os.fspath(stored)
        if is_url(text):
            raise ValueError(f"{text!r} is an URL, not a name in the artifacts tree")
        parts = Path(text).parts
        if not parts:
            raise ValueError("an empty name names nothing in the artifacts tree")
        if not Path(text).is_absolute() and parts[0] in KINDS:
            return self.path(Path(text).as_posix())
        for i in range(len(parts) - 1, 0, -1):
            if parts[i] in KINDS:
                return self.path("/".join(parts[i:]))
        return Path(text) if Path(text).is_absolute() else self.path(Path(text).as_posix())

    def day_dir(self, kind: str, day: str) -> Path:
        """``<kind>/day=D``."""
        return self.path(day_folder(day, kind))

    def days(self, kind: str) -> list[str]:
        """Days with a ``<kind>/day=D`` folder, sorted."""
        folder = self.path(kind)
        if not folder.is_dir():
            return []
        return sorted(p.name.removeprefix("day=") for p in folder.glob("day=*") if p.is_dir())

    # traffic -----------------------------------------------------------------------------------------------
    def traffic_file(self, day: str) -> Path:
        return self.day_dir(TRAFFIC, day) / "traffic.parquet"

    def traffic_segments(self, day: str) -> Path:
        """``segments.json``: the sealed segments the day's traffic.parquet was built from."""
        return self.day_dir(TRAFFIC, day) / "segments.json"

    # examples ----------------------------------------------------------------------------------------------
    def examples_file(self, day: str) -> Path:
        return self.day_dir(EXAMPLES, day) / "examples.parquet"

    def examples_files(self, until: str) -> list[Path]:
        """Every day's examples file that exists, for days <= ``until``, in day order."""
        return [p for d in self.days(EXAMPLES) if d <= until and (p := self.examples_file(d)).exists()]

    # golden ------------------------------------------------------------------------------------------------
    def golden_registry(self) -> Path:
        return self.path(f"{GOLDEN}/registry.parquet")

    def golden_registry_lock(self) -> Path:
        return self.path(f"{GOLDEN}/.registry.lock")

    def golden_dir(self, day: str) -> Path:
        return self.day_dir(GOLDEN, day)

    def golden_file(self, day: str) -> Path:
        return self.golden_dir(day) / "golden.parquet"

    def golden_keys(self, day: str) -> Path:
        return self.golden_dir(day) / KEYS_FILE

    def golden_commitment(self, day: str) -> Path:
        return self.golden_dir(day) / COMMITMENT_FILE

    # training set ------------------------------------------------------------------------------------------
    def train_dir(self, day: str) -> Path:
        return self.day_dir(TRAIN, day)

    def train_jsonl(self, day: str) -> Path:
        return self.train_dir(day) / "train.jsonl"

    def train_keys(self, day: str) -> Path:
        return self.train_dir(day) / KEYS_FILE

    def train_labels(self, day: str) -> Path:
        """``<key> <label source>`` per training row, in file order (``ratchet_assets.night.training_set``)."""
        return self.train_dir(day) / "labels.txt"

    def train_commitment(self, day: str) -> Path:
        return self.train_dir(day) / COMMITMENT_FILE

    # adapters ----------------------------------------------------------------------------------------------
    def adapters_dir(self) -> Path:
        return self.path(ADAPTERS)

    def adapter_dir(self, version: str) -> Path:
        """``adapters/<version>/``: the PEFT files of one adapter."""
        return self.path(f"{ADAPTERS}/{_name(version, 'version')}")

    def adapter_pointer(self, day: str) -> Path:
        """``adapters/day=D/adapter.json``: which version night D trained (or reused)."""
        return self.day_dir(ADAPTERS, day) / "adapter.json"

    def adapter_staging(self, fingerprint: str) -> Path:
        """Where a training run writes before its adapter is renamed to ``adapters/<version>/``."""
        return self.path(f"{ADAPTERS}/.staging-{_name(fingerprint, 'fingerprint')[:16]}")

    def adapter_versions(self) -> list[str]:
        """Versions with a complete adapter folder (``adapters/v*/adapter_config.json``), sorted."""
        return sorted(p.parent.name for p in self.adapters_dir().glob(f"v*/{ADAPTER_CONFIG_FILE}"))

    # certificates ------------------------------------------------------------------------------------------
    def certificates_dir(self) -> Path:
        return self.path(CERTIFICATES)

    def certificate(self, version: str) -> Path:
        return self.path(f"{CERTIFICATES}/{_name(version, 'version')}.dsse.json")

    def recertificate(self, version: str, day: str) -> Path:
        """``certificates/<version>@<day>.dsse.json``: night `day`'s certificate of a version an earlier night
        minted (its adapter has the same content, ``ratchet_assets.release.content``); certificates are write-once."""
        return self.path(f"{CERTIFICATES}/{_name(version, 'version')}@{_name(day, 'day')}.dsse.json")

    def night_certificate(self, version: str, day: str) -> Path:
        """Night `day`'s certificate of `version`: :meth:`certificate` for the night that minted it (or a rerun of
        that night), :meth:`recertificate` when a later night's adapter is the same version (it re-certifies it on
        its own golden set). Which night minted it is read from the first certificate's ``day``."""
        import base64
        import json

        first = self.certificate(version)
        if not first.exists():
            return first
        # only which night wrote it is read here (the registry verifies every certificate it registers); an
        # unreadable one names no night, so a later night never overwrites a write-once certificate
        try:
            envelope = json.loads(first.read_text(encoding="utf-8"))
            minted_on = json.loads(base64.b64decode(envelope["payload"]))["predicate"].get("day")
        except (OSError, ValueError, KeyError, TypeError):
            minted_on = None
        return first if minted_on == day else self.recertificate(version, day)

    def certificate_predicate(self, version: str) -> Path:
        """An unsigned certificate predicate (``ratchet sim`` holds no signing key)."""
        return self.path(f"{CERTIFICATES}/{_name(version, 'version')}.predicate.json")

    def certificate_files(self) -> list[Path]:
        """Every certificate on disk, sorted by name."""
        return sorted(self.certificates_dir().glob("*.dsse.json"))

    # BOMs --------------------------------------------------------------------------------------------------
    def bom_dir(self, version: str) -> Path:
        return self.path(f"{BOMS}/{_name(version, 'version')}")

    def bom(self, version: str) -> Path:
        return self.bom_dir(version) / BOM_FILE

    def bom_notice(self, version: str) -> Path:
        return self.bom_dir(version) / BOM_NOTICE_FILE

    def bom_certificate(self, version: str) -> Path:
        """The certificate copied beside the BOM (so a BOM folder verifies on its own)."""
        return self.bom_dir(version) / BOM_CERTIFICATE_FILE

    def bom_train_keys(self, version: str) -> Path:
        return self.bom_dir(version) / BOM_TRAIN_KEYS_FILE

    def bom_golden_keys(self, version: str) -> Path:
        return self.bom_dir(version) / BOM_GOLDEN_KEYS_FILE

    def bom_disjoint_proof(self, version: str) -> Path:
        return self.bom_dir(version) / BOM_DISJOINT_PROOF_FILE

    def bom_files(self) -> list[Path]:
        """Every signed BOM on disk (``boms/*/bom.dsse.json``), sorted."""
        return sorted(self.path(BOMS).glob(f"*/{BOM_FILE}"))

    # receipts ----------------------------------------------------------------------------------------------
    def receipt_dir(self, day: str) -> Path:
        """``receipts/D/`` (no ``day=``: receipts predate the partition-style folders; kept for old days)."""
        return self.path(f"{RECEIPTS}/{_name(day, 'day')}")

    def receipt_envelope(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_ENVELOPE_FILE

    def receipt_rows(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_ROWS_FILE

    def receipt_tree(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_TREE_FILE

    def receipt_clients(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_CLIENTS_FILE

    def receipt_estimates(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_ESTIMATES_FILE

    def receipt_pairs(self, day: str) -> Path:
        return self.receipt_dir(day) / RECEIPT_PAIRS_FILE

    def receipt_days(self) -> list[str]:
        """Days with a signed receipt, sorted."""
        folder = self.path(RECEIPTS)
        if not folder.is_dir():
            return []
        return sorted(p.parent.name for p in folder.glob(f"*/{RECEIPT_ENVELOPE_FILE}"))

    # imports (ratchet_assets.governance.importer) -------------------------------------------------------------
    def import_dir(self, import_id: str) -> Path:
        return self.path(f"{IMPORTS}/{_name(import_id, 'import id')}")

    def import_examples(self, import_id: str) -> Path:
        """The imported rows, with the columns of an examples file plus ``role`` (golden | train)."""
        return self.import_dir(import_id) / "examples.parquet"

    def import_provenance(self, import_id: str) -> Path:
        return self.import_dir(import_id) / "provenance.json"

    def import_files(self, until: str | None = None) -> list[Path]:
        """Every import's examples file, sorted by import id; with ``until``, only imports whose rows join the
        night on or before that day (an import id starts with its day)."""
        files = sorted(self.path(IMPORTS).glob("*/examples.parquet"))
        return files if until is None else [p for p in files if p.parent.name[:10] <= until]


@dataclass(frozen=True)
class DataExport:
    """The folder ``ratchet export`` fills: one file per kind (``requests.jsonl`` ...) and ``manifest.json``."""

    root: Path

    def file(self, kind: str, fmt: str) -> Path:
        return Path(self.root) / f"{_name(kind, 'export kind')}.{_name(fmt, 'format')}"

    @property
    def manifest(self) -> Path:
        return Path(self.root) / "manifest.json"


@dataclass(frozen=True)
class AdapterExport:
    """The folder ``ratchet admin export-adapter`` fills: ``adapter/`` plus the BOM folder's files by name."""

    root: Path

    @property
    def adapter_dir(self) -> Path:
        return Path(self.root) / "adapter"

    def file(self, name: str) -> Path:
        if name not in BOM_FILES:
            raise ValueError(f"{name} is not a file of an adapter export ({', '.join(BOM_FILES)})")
        return Path(self.root) / name


def _name(value: str, what: str) -> str:
    """One path component: a version, day or fingerprint never climbs out of its folder."""
    value = str(value)
    if not value or "/" in value or "\\" in value or value in (".", ".."):
        raise ValueError(f"not a valid {what} for an artifact path: {value!r}")
    return value
