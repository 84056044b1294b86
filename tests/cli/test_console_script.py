"""The `ratchet` console script (``ratchet_cli``): `--help`, `init`, and `config check` naming each bad setting
without showing a secret, refusing the keys the services would refuse.

(The settings contract itself is tested in tests/core/test_settings.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

RATCHET = [sys.executable, "-m", "ratchet_cli.main"]


def run(args: list[str], env_extra: dict[str, str] | None = None, cwd=None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("RATCHET_")}
    env.update(env_extra or {})
    return subprocess.run([*RATCHET, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)


def test_config_check_lists_problems_and_masks_secrets(tmp_path):
    bad = run(
        ["config", "check", "--json"],
        {"RATCHET_MAX_BODY_BYTES": "-3", "RATCHET_DAY_SECONDS": "soon", "RATCHET_ADMIN_KEY": "hunter2"},
        cwd=tmp_path,
    )
    assert bad.returncode == 1
    report = json.loads(bad.stdout)
    for name in ("RATCHET_MAX_BODY_BYTES", "RATCHET_DAY_SECONDS"):  # every problem, not only the first
        assert any(p.startswith(name) for p in report["problems"]), report["problems"]
    assert "hunter2" not in bad.stdout + bad.stderr
    good = run(["config", "check"], {"RATCHET_HOME": str(tmp_path)}, cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "configuration OK" in good.stdout


def test_help_lists_existing_commands():
    out = run(["--help"])
    assert out.returncode == 0
    for name in ("stats", "verify", "keygen", "config", "init"):
        assert f"  {name}" in out.stdout


def test_init_creates_keys_once(tmp_path):
    first = run(["init", "--json"], {"RATCHET_HOME": str(tmp_path / "home")}, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    info = json.loads(first.stdout)
    key_file = tmp_path / "home" / "keys" / "signing.key"
    assert key_file.exists() and (key_file.stat().st_mode & 0o077) == 0
    second = json.loads(
        run(["init", "--json"], {"RATCHET_HOME": str(tmp_path / "home")}, cwd=tmp_path).stdout
    )
    assert second["key_id"] == info["key_id"]
    assert info["created_key"] == "true" and second["created_key"] == "false"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"RATCHET_API_KEYS": ":sk-x,alice"}, "RATCHET_API_KEYS: entry 1 has an empty name"),
        ({"RATCHET_API_KEYS": "alice"}, "RATCHET_API_KEYS: entry 1 has no ':'"),
        ({"RATCHET_API_KEYS": "alice: "}, "RATCHET_API_KEYS: entry 1 has an empty secret"),
        ({"RATCHET_API_KEYS": "a:sk-1,a:sk-2"}, "RATCHET_API_KEYS: entries 1 and 2 both name client 'a'"),
        (
            {"RATCHET_API_KEYS": "ok:sk-0,<b>x:sk-1"},
            "RATCHET_API_KEYS: entry 2: '<b>x' is not a valid client",
        ),
        ({"RATCHET_API_KEYS": "a:sk-1,b:sk-1"}, "RATCHET_API_KEYS: entries 1 and 2 share a secret"),
        ({"RATCHET_SIGNING_KEY": "sk-not-a-key"}, "RATCHET_SIGNING_KEY: private key"),
        ({"RATCHET_SIGNING_KEY": "@{home}/missing.key"}, "RATCHET_SIGNING_KEY=@"),
        ({"signing.key": "not a key"}, "signing key file"),
    ],
)
def test_config_check_refuses_the_keys_the_services_would_refuse(tmp_path, env, expected):
    from click.testing import CliRunner

    from ratchet_cli.config_cmd import config
    from ratchet_core.api_keys import parse_api_keys

    home = tmp_path / "home"
    if "signing.key" in env:
        (home / "keys").mkdir(parents=True)
        (home / "keys" / "signing.key").write_text(env.pop("signing.key"))
    env = {k: v.format(home=home) for k, v in env.items()}
    cleared = {k: None for k in os.environ if k.startswith("RATCHET_")}
    result = CliRunner(env={**cleared, "RATCHET_HOME": str(home), **env}).invoke(
        config, ["check", "--offline", "--json"]
    )
    assert result.exit_code == 1, result.output
    report = json.loads(result.stdout)
    assert not report["ok"] and any(p.startswith(expected) for p in report["problems"]), report["problems"]
    assert "sk-1" not in result.output and "sk-not-a-key" not in result.output
    if (
        "RATCHET_API_KEYS" in env
    ):  # the gateway and the effect gate start with the same parse: they refuse it too
        with pytest.raises(ValueError) as refused:
            parse_api_keys(env["RATCHET_API_KEYS"])
        assert str(refused.value).startswith(expected)


def test_config_check_accepts_good_keys_and_a_key_file_not_made_yet(tmp_path):
    from click.testing import CliRunner

    from ratchet_cli.config_cmd import config

    cleared = {k: None for k in os.environ if k.startswith("RATCHET_")}
    env = {**cleared, "RATCHET_HOME": str(tmp_path / "home"), "RATCHET_API_KEYS": "app1:sk-a,app.2:sk-b"}
    result = CliRunner(env=env).invoke(config, ["check", "--offline"])
    assert result.exit_code == 0 and "configuration OK" in result.output, result.output


def test_config_check_reports_a_provider_extra_that_would_choose_the_endpoint(tmp_path):
    env = {"RATCHET_HOME": str(tmp_path), "RATCHET_PROVIDER_EXTRA_FIELDS": "top_k,api_base,mock_response"}
    bad = run(["config", "check", "--json"], env, cwd=tmp_path)
    assert bad.returncode == 1
    (problem,) = [
        p for p in json.loads(bad.stdout)["problems"] if p.startswith("RATCHET_PROVIDER_EXTRA_FIELDS")
    ]
    assert "'api_base'" in problem and "'mock_response'" in problem and "'top_k'" not in problem
    env["RATCHET_PROVIDER_EXTRA_FIELDS"] = "top_k, repetition_penalty"
    good = run(["config", "check", "--json"], env, cwd=tmp_path)
    assert good.returncode == 0, good.stdout
    (row,) = [
        s for s in json.loads(good.stdout)["settings"] if s["variable"] == "RATCHET_PROVIDER_EXTRA_FIELDS"
    ]
    assert row["value"] == "repetition_penalty,top_k"
