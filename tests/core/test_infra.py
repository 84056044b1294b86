"""Infra files parse and keep the contracts the README promises (no Docker engine or cluster here)."""

from __future__ import annotations

from pathlib import Path

import yaml

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_compose_services_and_env():
    doc = yaml.safe_load((INFRA / "docker-compose.yaml").read_text())
    services = doc["services"]
    assert {"postgres", "gateway", "dagster-webserver", "dagster-daemon", "vllm"} <= set(services)
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
    # only the control plane holds the signing key; the gateway never does
    assert "RATCHET_SIGNING_KEY" not in services["gateway"]["environment"]
    assert "RATCHET_SIGNING_KEY" in services["dagster-daemon"]["environment"]
    assert services["gateway"]["environment"]["RATCHET_STUDENT_BASE_URL"].startswith("http://vllm:")
    assert services["vllm"]["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "--enable-lora" in services["vllm"]["command"]


def test_helm_values_run_ratchet_code_location_with_partition_limit():
    doc = yaml.safe_load((INFRA / "helm" / "dagster-values.yaml").read_text())
    (dep,) = doc["dagster-user-deployments"]["deployments"]
    assert dep["dagsterApiGrpcArgs"] == ["-m", "ratchet_assets.definitions"]
    assert doc["runLauncher"]["type"] == "K8sRunLauncher"
    limits = doc["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert {"key": "dagster/partition", "limit": 1, "value": {"applyLimitPerUniqueValue": True}} in limits


def test_vllm_launch_enables_runtime_lora():
    text = (INFRA / "vllm" / "launch.sh").read_text()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in text and "--enable-lora" in text
