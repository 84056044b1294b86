"""The deploy files agree with Ratchet's settings, its CLI, its image and each other (no Docker engine or cluster here).

docker-compose.yaml is interpolated as `docker compose` does (``${VAR:-default}``, ``${VAR:?error}``) and every
service is checked: image, command (parsed by the real CLI), environment (loaded as Ratchet settings; Dagster's
instance variables against infra/dagster/dagster.yaml), volumes and secrets. Where the `docker compose` plugin
exists, `docker compose config` must accept the file too. The Helm values are checked structurally against the
parts of the Dagster chart's values schema they use (the chart is not on PyPI; its schema is not vendored here).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from click.testing import CliRunner

from ratchet_assets.night.adapter import NIGHT_TRAINING
from ratchet_core.keys import public_key_path
from ratchet_core.settings import load_settings, unknown_variables
from tests.system_packages import require

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
COMPOSE_ENV = {  # what an operator sets (infra/README.md, first deploy)
    "POSTGRES_PASSWORD": "pg-secret",
    "RATCHET_ADMIN_KEY": "admin-secret",
    "RATCHET_STUDENT_API_KEY": "student-secret",
    "RATCHET_BASE_MODEL_DIR": "/srv/models/qwen2.5-0.5b",
}
RATCHET_SERVICES = ("gateway-1", "gateway-2", "dagster-webserver", "dagster-daemon")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable substitution: ${V}, ${V:-default}, ${V-default}, ${V:?error}, ${V?error}."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        present = name in env and (env[name] != "" or op in ("-", "?"))
        if present:
            return env[name]
        if op in (":?", "?"):
            raise KeyError(f"{name}: {arg}")
        return arg or ""

    return _VAR.sub(sub, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return interpolate(yaml.safe_load((INFRA / "docker-compose.yaml").read_text()), COMPOSE_ENV)


def _mounts(svc: dict[str, Any]) -> dict[str, str]:
    """container path -> source (named volume or host path) of a service's volumes."""
    out = {}
    for v in svc.get("volumes", []):
        source, target = v.split(":")[:2]
        out[target] = source
    return out


def _covered(path: str, mounts: dict[str, str]) -> bool:
    return any(path == t or path.startswith(t.rstrip("/") + "/") for t in mounts)


def _settings_for(env: dict[str, str], monkeypatch: pytest.MonkeyPatch):
    for k in [k for k in os.environ if k.upper().startswith("RATCHET_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return load_settings()


def _dockerfile() -> str:
    return (INFRA / "Dockerfile").read_text()


def test_compose_needs_the_documented_variables() -> None:
    doc = yaml.safe_load((INFRA / "docker-compose.yaml").read_text())
    for missing in COMPOSE_ENV:
        env = {k: v for k, v in COMPOSE_ENV.items() if k != missing}
        with pytest.raises(KeyError, match=missing):
            interpolate(doc, env)


def test_every_ratchet_service_runs_the_image_with_valid_settings(compose, monkeypatch) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "vllm", *RATCHET_SERVICES}
    image = re.search(r"docker build -f infra/Dockerfile -t (\S+) \.", _dockerfile()).group(1)
    for name in RATCHET_SERVICES:
        svc = services[name]
        assert svc["image"] == image and svc["build"] == {
            "context": "..",
            "dockerfile": "infra/Dockerfile",
        }, name
        env = {k: str(v) for k, v in svc["environment"].items()}
        assert unknown_variables(env) == [], name
        settings = _settings_for(env, monkeypatch)  # raises SettingsError naming any bad value
        mounts = _mounts(svc)
        for path in (str(settings.home), settings.lake_root, settings.artifacts_root):
            assert _covered(path, mounts) and mounts["/var/lib/ratchet"] == "ratchet", (name, path)
        # the control DB is the compose Postgres, with its credentials
        url = urlsplit(settings.control_db_url)
        pg = services["postgres"]["environment"]
        assert url.scheme == "postgresql+psycopg" and (url.hostname, url.port) == ("postgres", 5432)
        assert (url.username, url.password, url.path) == (
            pg["POSTGRES_USER"],
            pg["POSTGRES_PASSWORD"],
            "/" + pg["POSTGRES_DB"],
        )
        assert svc["depends_on"]["postgres"] == {"condition": "service_healthy"}
        # the student is compose's vLLM, with the key vLLM was started with
        student = urlsplit(settings.student_base_url)
        vllm_cmd = services["vllm"]["command"]
        assert student.hostname == "vllm" and str(student.port) == vllm_cmd[vllm_cmd.index("--port") + 1]
        assert vllm_cmd[vllm_cmd.index("--api-key") + 1] == settings.student_api_key


def test_two_gateways_distinct_replicas_public_key_only(compose, monkeypatch) -> None:
    from ratchet_cli.main import cli as ratchet

    services = compose["services"]
    gateways = [services["gateway-1"], services["gateway-2"]]
    # the replica id is the host name (ratchet_gateway.ledger): two hosts, two ledgers, two segment prefixes
    assert len({g["hostname"] for g in gateways}) == 2
    assert len({g["ports"][0].split(":")[0] for g in gateways}) == 2
    for g in gateways:
        assert g["command"][:2] == ["ratchet", "gateway"]
        gateway_cmd = ratchet.get_command(None, "gateway")
        ctx = gateway_cmd.make_context("gateway", list(g["command"][2:]))  # parses with the real options
        assert ctx.params["host"] == "0.0.0.0" and str(ctx.params["port"]) == g["ports"][0].split(":")[1]
        env = {k: str(v) for k, v in g["environment"].items()}
        settings = _settings_for(env, monkeypatch)
        assert not settings.signing_key and "signing_key" not in str(g["secrets"])
        targets = {s["target"]: s["source"] for s in g["secrets"] if isinstance(s, dict)}
        assert targets[str(public_key_path(settings))] == "signing_pub"  # the key manifests must verify with
        assert env["RATCHET_API_KEYS"] == "@/run/secrets/api_keys" and "api_keys" in g["secrets"]
    runner = CliRunner()
    assert runner.invoke(ratchet, ["gateway", "--help"]).exit_code == 0


def test_docker_compose_config_accepts_the_file() -> None:
    """`docker compose config` is the authority where the compose plugin exists (operators' hosts); everywhere
    Debian's `docker-compose` 1.29 (no engine needed) validates the file, beside the structural tests above."""
    require("docker-compose")
    has_plugin = shutil.which("docker") is not None and (
        subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0
    )
    command = ["docker", "compose", "-f", str(INFRA / "docker-compose.yaml"), "config", "--quiet"]
    env = {**COMPOSE_ENV, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    if has_plugin:
        res = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
        assert res.returncode == 0, res.stderr
    # Debian's docker-compose 1.29 (apt; .ci/run installs it) validates without an engine
    v1 = ["docker-compose", "-f", str(INFRA / "docker-compose.yaml"), "config", "-q"]
    res = subprocess.run(v1, capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    res = subprocess.run(v1, capture_output=True, text=True, timeout=60, env={**env, "POSTGRES_PASSWORD": ""})
    assert res.returncode != 0 and "POSTGRES_PASSWORD" in res.stderr  # `:?` refuses an unset secret
    for missing in COMPOSE_ENV:  # compose refuses to start without each of them (the `:?` in the file)
        assert f"${{{missing}:?" in (INFRA / "docker-compose.yaml").read_text()


def test_dagster_services_use_the_postgres_instance_of_the_image(compose) -> None:
    services = compose["services"]
    instance = yaml.safe_load((INFRA / "dagster" / "dagster.yaml").read_text())
    needed = set(re.findall(r"\{env: (\w+)\}", (INFRA / "dagster" / "dagster.yaml").read_text()))
    assert {"DAGSTER_PG_HOST", "DAGSTER_PG_DB", "DAGSTER_STORAGE_DIR"} <= needed
    assert "postgres" in instance["storage"]
    dockerfile = _dockerfile()
    workdir = re.search(r"^WORKDIR (\S+)", dockerfile, re.M).group(1)
    init_sql = (INFRA / "postgres" / "init-databases.sql").read_text()
    pg = services["postgres"]
    assert "./postgres/init-databases.sql:/docker-entrypoint-initdb.d/10-databases.sql:ro" in pg["volumes"]
    for name in ("dagster-webserver", "dagster-daemon"):
        svc = services[name]
        env = {k: str(v) for k, v in svc["environment"].items()}
        assert needed <= set(env), (name, needed - set(env))
        assert f"COPY infra/dagster/dagster.yaml {env['DAGSTER_HOME']}/dagster.yaml" in dockerfile
        assert (env["DAGSTER_PG_HOST"], env["DAGSTER_PG_PORT"]) == ("postgres", "5432")
        assert (env["DAGSTER_PG_USER"], env["DAGSTER_PG_PASSWORD"]) == (
            pg["environment"]["POSTGRES_USER"],
            pg["environment"]["POSTGRES_PASSWORD"],
        )
        assert f"CREATE DATABASE {env['DAGSTER_PG_DB']};" in init_sql
        assert env["DAGSTER_PG_DB"] != pg["environment"]["POSTGRES_DB"]  # Dagster migrates its own database
        assert _covered(env["DAGSTER_STORAGE_DIR"], _mounts(svc))
        workspace = svc["command"][svc["command"].index("-w") + 1]
        assert workspace == f"{workdir}/workspace.yaml" and "COPY workspace.yaml" in dockerfile
    assert services["dagster-webserver"]["command"][0] == "dagster-webserver"
    daemon = services["dagster-daemon"]
    assert daemon["command"][:2] == ["dagster-daemon", "run"]
    # only the control plane signs; it trains too, so it sees the base model vLLM serves
    assert daemon["environment"]["RATCHET_SIGNING_KEY"] == "@/run/secrets/signing_key"
    assert "signing_key" in daemon["secrets"]
    assert "RATCHET_SIGNING_KEY" not in services["dagster-webserver"]["environment"]
    base = daemon["environment"]["RATCHET_STUDENT_BASE_MODEL"]
    assert _mounts(daemon)[base] == _mounts(services["vllm"])[base] == COMPOSE_ENV["RATCHET_BASE_MODEL_DIR"]


def test_vllm_serves_the_trained_adapters(compose) -> None:
    from ratchet_assets.defs.lora_adapter import LoraAdapterConfig

    vllm = compose["services"]["vllm"]
    cmd = vllm["command"]
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"  # /v1/load_lora_adapter
    assert "--enable-lora" in cmd and int(cmd[cmd.index("--max-loras") + 1]) >= 2  # live + canary at once
    rank = int(cmd[cmd.index("--max-lora-rank") + 1])
    assert rank >= NIGHT_TRAINING.rank and rank >= LoraAdapterConfig().rank  # a trained adapter always loads
    assert int(cmd[cmd.index("--max-logprobs") + 1]) >= 1  # the gateway's confidence reads logprobs
    # adapters are loaded by the path the control plane wrote them to: same volume, same place
    daemon = compose["services"]["dagster-daemon"]
    artifacts = daemon["environment"]["RATCHET_ARTIFACTS"]
    assert _covered(artifacts, _mounts(vllm)) and _mounts(vllm)["/var/lib/ratchet"] == "ratchet"
    assert cmd[0] == daemon["environment"]["RATCHET_STUDENT_BASE_MODEL"]
    assert vllm["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
    # the reconciler checks adapters against the rank vLLM loads; tool calls come back through the base's parser
    assert int(daemon["environment"]["RATCHET_STUDENT_MAX_LORA_RANK"]) == rank
    assert _tool_flags(cmd) == ("hermes", True)


def _tool_flags(args: list[str]) -> tuple[str, bool]:
    """(--tool-call-parser, --enable-auto-tool-choice given) of a vLLM command line."""
    return args[args.index("--tool-call-parser") + 1], "--enable-auto-tool-choice" in args


def test_every_vllm_deployment_serves_tool_calls_structured_and_checks_the_rank(compose) -> None:
    """launch.sh, compose, the Kubernetes manifest (and the GPU check) start vLLM alike: the hermes tool parser
    Ratchet's templates need (the demo's and Qwen2.5-style ones), --max-lora-rank equal to
    RATCHET_STUDENT_MAX_LORA_RANK's default, no sampling defaults from the base's generation_config.json."""
    from ratchet_core.chat_format import RATCHET_CHAT_TEMPLATE
    from ratchet_core.chatml_base import CHATML_TOOLS_TEMPLATE
    from ratchet_core.settings import Settings
    from ratchet_core.tool_calls import tool_parser_of

    parsers = {tool_parser_of(RATCHET_CHAT_TEMPLATE), tool_parser_of(CHATML_TOOLS_TEMPLATE)}
    default_rank = Settings.model_fields["student_max_lora_rank"].default
    launch = (INFRA / "vllm" / "launch.sh").read_text()
    assert (
        "--enable-auto-tool-choice" in launch
        and '${CHAT_TEMPLATE:+--chat-template "$CHAT_TEMPLATE"}' in launch
    )
    assert {re.search(r'--tool-call-parser "\$\{TOOL_PARSER:-(\w+)\}"', launch).group(1)} == parsers
    assert int(re.search(r'--max-lora-rank "\$\{MAX_LORA_RANK:-(\d+)\}"', launch).group(1)) == default_rank
    (deployment, service) = list(yaml.safe_load_all((INFRA / "k8s" / "vllm.yaml").read_text()))
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    for cmd in (args, compose["services"]["vllm"]["command"]):
        assert {_tool_flags(cmd)[0]} == parsers and _tool_flags(cmd)[1]
        assert int(cmd[cmd.index("--max-lora-rank") + 1]) == default_rank and "--enable-lora" in cmd
        # the answers the night certified greedy, not the base's generation_config.json sampling defaults
        assert cmd[cmd.index("--generation-config") + 1] == "vllm"
    for script in (launch, (INFRA / "vllm" / "gpu_check.sh").read_text()):
        assert (
            "--generation-config vllm" in script and "--enable-auto-tool-choice --tool-call-parser" in script
        )
    helm = yaml.safe_load((INFRA / "helm" / "dagster-values.yaml").read_text())
    env = {e["name"]: e["value"] for e in helm["dagster-user-deployments"]["deployments"][0]["env"]}
    assert int(env["RATCHET_STUDENT_MAX_LORA_RANK"]) == default_rank
    assert (
        env["RATCHET_STUDENT_BASE_URL"]
        == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}/v1"
    )


def test_volumes_and_secrets_are_declared(compose) -> None:
    declared_volumes = set(compose["volumes"])
    declared_secrets = set(compose["secrets"])
    for name, svc in compose["services"].items():
        for source in _mounts(svc).values():
            if not source.startswith(("/", ".")):
                assert source in declared_volumes, (name, source)
            elif source.startswith("."):
                assert (INFRA / source).exists(), (name, source)
        for s in svc.get("secrets", []):
            assert (s["source"] if isinstance(s, dict) else s) in declared_secrets, (name, s)
    assert {s["file"] for s in compose["secrets"].values()} == {
        "./secrets/api_keys.txt",
        "./secrets/signing.key",
        "./secrets/signing.pub",
    }


# The parts of the Dagster chart's values.schema.json (dagster-io/dagster helm/dagster, 1.13.x) these values use,
# transcribed: keys, types and the closed objects (additionalProperties: false) that reject a misspelt key.
_SECRET_REFS = {"type": "array", "items": {"type": "object", "required": ["name"]}}
_ENV_LIST = {
    "type": "array",
    "items": {"type": "object", "required": ["name", "value"], "properties": {"value": {"type": "string"}}},
}
_PVC_VOLUMES = {
    "type": "array",
    "items": {"type": "object", "required": ["name", "persistentVolumeClaim"]},
}
_MOUNTS = {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}}
HELM_SCHEMA = {
    "type": "object",
    "properties": {
        "global": {"type": "object", "properties": {"postgresqlSecretName": {"type": "string"}}},
        "dagsterWebserver": {
            "type": "object",
            "properties": {"replicaCount": {"type": "integer"}},
            "additionalProperties": False,
        },
        "dagster-user-deployments": {
            "type": "object",
            "required": ["enabled", "deployments"],
            "properties": {
                "enabled": {"type": "boolean"},
                "deployments": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "image", "port"],
                        "properties": {
                            "name": {"type": "string"},
                            "image": {
                                "type": "object",
                                "required": ["repository", "pullPolicy"],
                                "properties": {
                                    "repository": {"type": "string"},
                                    "tag": {"type": ["string", "integer", "null"]},
                                    "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                                },
                            },
                            "dagsterApiGrpcArgs": {"type": "array", "items": {"type": "string"}},
                            "port": {"type": "integer"},
                            "env": _ENV_LIST,
                            "envSecrets": _SECRET_REFS,
                            "volumeMounts": _MOUNTS,
                            "volumes": _PVC_VOLUMES,
                        },
                    },
                },
            },
        },
        "postgresql": {
            "type": "object",
            "properties": {
                "enabled": {"type": "boolean"},
                "postgresqlUsername": {"type": "string"},
                "postgresqlDatabase": {"type": "string"},
                "postgresqlScheme": {"type": "string"},
            },
        },
        "runLauncher": {
            "type": "object",
            "required": ["type", "config"],
            "additionalProperties": False,
            "properties": {
                "type": {"enum": ["CeleryK8sRunLauncher", "K8sRunLauncher", "CustomRunLauncher"]},
                "config": {
                    "type": "object",
                    "properties": {
                        "k8sRunLauncher": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "envSecrets": _SECRET_REFS,
                                "volumeMounts": _MOUNTS,
                                "volumes": _PVC_VOLUMES,
                            },
                        }
                    },
                },
            },
        },
        "dagsterDaemon": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "enabled": {"type": "boolean"},
                "runCoordinator": {
                    "type": "object",
                    "required": ["enabled", "type", "config"],
                    "additionalProperties": False,
                    "properties": {
                        "enabled": {"type": "boolean"},
                        "type": {"enum": ["QueuedRunCoordinator", "CustomRunCoordinator"]},
                        "config": {
                            "type": "object",
                            "properties": {
                                "queuedRunCoordinator": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "properties": {
                                        "maxConcurrentRuns": {"type": "integer"},
                                        "tagConcurrencyLimits": {
                                            "type": "array",
                                            "items": {
                                                "type": "object",
                                                "required": ["key", "limit"],
                                                "additionalProperties": False,
                                                "properties": {
                                                    "key": {"type": "string"},
                                                    "limit": {"type": "integer"},
                                                    "value": {
                                                        "anyOf": [
                                                            {"type": "string"},
                                                            {
                                                                "type": "object",
                                                                "required": ["applyLimitPerUniqueValue"],
                                                                "additionalProperties": False,
                                                                "properties": {
                                                                    "applyLimitPerUniqueValue": {
                                                                        "type": "boolean"
                                                                    }
                                                                },
                                                            },
                                                        ]
                                                    },
                                                },
                                            },
                                        },
                                    },
                                }
                            },
                        },
                    },
                },
            },
        },
        "telemetry": {
            "type": "object",
            "required": ["enabled"],
            "additionalProperties": False,
            "properties": {"enabled": {"type": "boolean"}},
        },
    },
    "additionalProperties": False,  # the chart's top level is closed to these names (plus ones unused here)
}


def test_helm_values_fit_the_chart_schema_and_run_ratchet(monkeypatch) -> None:
    import jsonschema

    doc = yaml.safe_load((INFRA / "helm" / "dagster-values.yaml").read_text())
    jsonschema.validate(doc, HELM_SCHEMA)
    with pytest.raises(jsonschema.ValidationError):  # the check bites: a misspelt key is refused
        jsonschema.validate(
            {**doc, "dagsterDaemon": {**doc["dagsterDaemon"], "runCordinator": {}}}, HELM_SCHEMA
        )
    (dep,) = doc["dagster-user-deployments"]["deployments"]
    assert dep["dagsterApiGrpcArgs"] == ["-m", "ratchet_assets.definitions"]
    env = {e["name"]: e["value"] for e in dep["env"]}
    assert unknown_variables(env) == []
    _settings_for(env, monkeypatch)
    assert doc["runLauncher"]["type"] == "K8sRunLauncher"
    # Dagster's Postgres through psycopg2 (dagster-postgres's NOTIFY), as in infra/dagster/dagster.yaml
    instance = yaml.safe_load((INFRA / "dagster" / "dagster.yaml").read_text())
    assert doc["postgresql"]["postgresqlScheme"] == instance["storage"]["postgres"]["postgres_db"]["scheme"]
    limits = doc["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    embedded = yaml.safe_load((ROOT / "dagster.yaml").read_text())["concurrency"]["runs"]
    assert {"key": "dagster/partition", "limit": 1, "value": {"applyLimitPerUniqueValue": True}} in limits
    assert embedded["tag_concurrency_limits"][0]["key"] == "dagster/partition"


def test_vllm_launch_enables_runtime_lora() -> None:
    text = (INFRA / "vllm" / "launch.sh").read_text()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in text and "--enable-lora" in text
    rank = int(re.search(r"--max-lora-rank \"\$\{MAX_LORA_RANK:-(\d+)\}\"", text).group(1))
    assert rank >= NIGHT_TRAINING.rank
