"""The layer check (tests/layers.py): the real tree holds, and each kind of wrong import in a small tree fails it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.layers import ALLOWED_CYCLES, check, sizes

ROOT = Path(__file__).resolve().parents[1]


def tree(root: Path, files: dict[str, str]) -> Path:
    """A package tree under `root`: every folder of a file gets an empty __init__.py unless given."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in path.relative_to(root).parents:
            if folder != Path("."):
                (root / folder / "__init__.py").touch()
        path.write_text(text)
    return root


def test_the_real_tree_holds():
    assert check(ROOT) == []


def test_a_clean_tree_passes(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_stats/merkle.py": "import hashlib\n",
            "ratchet_core/lake.py": "from ratchet_stats import merkle\nfrom . import layout\n",
            "ratchet_core/layout.py": "from ratchet_stats.merkle import root\n",
            "ratchet_gateway/app.py": "from ratchet_core.lake import Lake\n",
            "ratchet_cli/main.py": "import ratchet_gateway.app\nimport ratchet_assets\n",
        },
    )
    assert check(root, allowed_cycles=()) == []


def test_an_upward_import_inside_a_function_fails_naming_file_line_and_rule(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_core/artifact_store.py": "import os\n\n\ndef digest():\n    from ratchet_assets.night import bom\n",
            "ratchet_assets/night/bom.py": "",
        },
    )
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith("ratchet_core/artifact_store.py:5: layer: ratchet_core.artifact_store imports ")
    assert "ratchet_assets.night.bom (upwards;" in problem


def test_the_gateway_and_the_control_plane_never_import_each_other(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_gateway/app.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from ratchet_assets.effects import EffectLedger\n",
            "ratchet_assets/effects/__init__.py": "",
        },
    )
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith("ratchet_gateway/app.py:3: layer:") and "(sideways;" in problem


def test_a_private_module_of_the_effect_gate_is_imported_only_from_inside_it(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_assets/effects/__init__.py": "from ratchet_assets.effects.ledger import EffectLedger\n",
            "ratchet_assets/effects/ledger.py": "class EffectLedger: ...\n",
            "ratchet_assets/effects/api.py": "from .ledger import EffectLedger\n",
            "ratchet_assets/night/receipts.py": "from ratchet_assets.effects import EffectLedger\n",
            "ratchet_cli/serve.py": "def serve():\n    from ratchet_assets.effects.api import create_app\n",
            "tests/assets/test_gate.py": "from ratchet_assets.effects import ledger\n",
            "benchmarks/gate.py": "import ratchet_assets.effects.ledger\n",
        },
    )
    problems = check(root, allowed_cycles=())
    assert problems == [
        "benchmarks/gate.py:1: sealed: benchmarks.gate imports ratchet_assets.effects.ledger (a private module "
        "of ratchet_assets.effects: import its names from ratchet_assets.effects itself)",
        "ratchet_cli/serve.py:2: sealed: ratchet_cli.serve imports ratchet_assets.effects.api (a private module "
        "of ratchet_assets.effects: import its names from ratchet_assets.effects itself)",
        "tests/assets/test_gate.py:1: sealed: tests.assets.test_gate imports ratchet_assets.effects.ledger (a "
        "private module of ratchet_assets.effects: import its names from ratchet_assets.effects itself)",
    ]


def test_the_effect_gates_public_names_import_from_the_package():
    import ratchet_assets.effects as gate

    for name in gate.__all__:
        assert getattr(gate, name) is not None, name


def test_importlib_with_a_literal_name_counts(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_stats/cli.py": "import importlib\n\nmod = importlib.import_module('ratchet_core.keys')\n",
            "ratchet_core/keys.py": "",
        },
    )
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith("ratchet_stats/cli.py:3: layer: ratchet_stats.cli imports ratchet_core.keys")


def test_product_code_never_imports_test_tooling(tmp_path):
    root = tree(tmp_path, {"ratchet_core/serve.py": "def f():\n    from tests.serve import free_port\n"})
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith("ratchet_core/serve.py:2: layer:") and "test tooling" in problem


def test_a_module_cycle_fails_with_both_imports(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_core/keys.py": "def history():\n    from ratchet_core import key_history\n",
            "ratchet_core/key_history.py": "from .keys import KeyTrustError\n",
        },
    )
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith(
        "module cycle: ratchet_core.key_history <-> ratchet_core.keys import each other"
    )
    assert (
        "ratchet_core/keys.py:2: module cycle: ratchet_core.keys imports ratchet_core.key_history" in problem
    )
    assert (
        "ratchet_core/key_history.py:1: module cycle: ratchet_core.key_history imports ratchet_core.keys"
        in problem
    )


def test_a_cycle_between_sub_packages_fails_without_a_module_cycle(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_assets/night/split.py": "from ratchet_assets.governance.importer import imports_until\n",
            "ratchet_assets/governance/importer.py": "",
            "ratchet_assets/governance/erase.py": "from ratchet_assets.night.erasures import load_erasures\n",
            "ratchet_assets/night/erasures.py": "",
        },
    )
    [problem] = check(root, allowed_cycles=())
    assert problem.startswith(
        "package cycle in ratchet_assets: ratchet_assets.governance <-> ratchet_assets.night import each other"
    )
    assert (
        "ratchet_assets/governance/erase.py:1:" in problem and "ratchet_assets/night/split.py:1:" in problem
    )


def test_an_allowed_cycle_passes_until_it_is_gone(tmp_path):
    files = {
        "ratchet_stats/receipt.py": "def load():\n    from ratchet_stats import receipt_v2\n",
        "ratchet_stats/receipt_v2.py": "from ratchet_stats.receipt import PREDICATE_TYPE\n",
    }
    allowed = [frozenset({"ratchet_stats.receipt", "ratchet_stats.receipt_v2"})]
    assert check(tree(tmp_path / "a", files), allowed_cycles=allowed) == []
    files["ratchet_stats/receipt_v2.py"] = ""
    [problem] = check(tree(tmp_path / "b", files), allowed_cycles=allowed)
    assert problem.startswith("stale allowance: the cycle ratchet_stats.receipt <-> ratchet_stats.receipt_v2")


def test_every_allowance_says_why():
    assert all(len(why) > 20 for why in ALLOWED_CYCLES.values())


def test_the_command_line_exits_non_zero_and_prints_each_problem(tmp_path):
    root = tree(tmp_path, {"ratchet_stats/a.py": "import ratchet_cli.main\n", "ratchet_cli/main.py": ""})
    done = subprocess.run(
        [sys.executable, "-m", "tests.layers", str(root)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stdout.startswith(
        "ratchet_stats/a.py:1: layer: ratchet_stats.a imports ratchet_cli.main (upwards;"
    )


def test_sizes_draw_each_layer_top_first_with_packages_files_lines_and_imports(tmp_path):
    root = tree(
        tmp_path,
        {
            "ratchet_stats/a.py": "x = 1\ny = 2\n",
            "ratchet_core/b.py": "import ratchet_stats.a\n",
            "ratchet_core/sub/c.py": "a = 1\nb = 2\nc = 3\n",
            "ratchet_cli/main.py": "import ratchet_core.b\n",
        },
    )
    drawn = [(rank, whole, parts, uses) for rank, whole, parts, uses in sizes(root) if whole.files]
    assert [(rank, whole.name, whole.files, uses) for rank, whole, _, uses in drawn] == [
        (3, "ratchet_cli", 2, ["ratchet_core"]),
        (1, "ratchet_core", 4, ["ratchet_stats"]),
        (0, "ratchet_stats", 2, []),
    ]
    core_parts = {p.name: (p.files, p.lines) for p in drawn[1][2]}
    assert core_parts == {"sub": (2, 3), "(modules)": (2, 1)}  # the sub-package's __init__.py counts, empty
    assert drawn[1][1].lines == 4 and drawn[2][1].lines == 2


def test_the_command_line_draws_the_real_house_with_sizes():
    done = subprocess.run(
        [sys.executable, "-m", "tests.layers", "--sizes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    packages = [line.split()[2] for line in lines if line.startswith("layer ")]
    assert packages == ["ratchet_cli", "ratchet_agents", "ratchet_gateway", "ratchet_assets", "ratchet_core",
                        "ratchet_stats"]  # fmt: skip
    assert any(line.split()[0] == ".night" for line in lines)  # sub-packages are listed under their package
    total = next(line for line in lines if line.split()[:1] == ["total"])
    assert int(total.split()[1]) == sum(len(list((ROOT / p).rglob("*.py"))) for p in packages)
    assert lines[-1].startswith("layers hold")
