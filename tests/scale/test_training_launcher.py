"""The `training` resource: RATCHET_TRAINING_LAUNCHER picks a Pipes subprocess or a Kubernetes pod, and the pod it
would submit (dagster_k8s's own pod builder, fed exactly what the launcher passes to PipesK8sClient.run) runs the
training module on a GPU node with the shared volume where the code server and the Helm values put it."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_k8s import PipesK8sClient
from dagster_k8s.pipes import build_pod_body, get_pod_name
from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, DAGSTER_PIPES_MESSAGES_ENV_VAR
from kubernetes.client import ApiClient

from ratchet_assets.defs.resources import night_resources
from ratchet_assets.defs.training_launcher import TRAIN_MODULE, TrainingLauncher
from ratchet_core.settings import SettingsError, load_settings

HELM = Path(__file__).resolve().parents[2] / "infra" / "helm" / "dagster-values.yaml"


def test_setting_selects_the_launcher(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert isinstance(night_resources(tmp_path)["training"].client(), dg.PipesSubprocessClient)
    monkeypatch.setenv("RATCHET_TRAINING_LAUNCHER", "k8s")
    monkeypatch.setenv("RATCHET_TRAINING_IMAGE", "registry.example/ratchet-train:7")
    training = night_resources(tmp_path)["training"]
    assert (training.kind, training.image) == ("k8s", "registry.example/ratchet-train:7")
    assert isinstance(training.client(), PipesK8sClient)
    monkeypatch.setenv("RATCHET_TRAINING_LAUNCHER", "slurm")
    with pytest.raises(SettingsError, match="RATCHET_TRAINING_LAUNCHER"):
        load_settings()


def test_k8s_pod_runs_training_on_a_gpu_with_the_shared_volume() -> None:
    launcher = TrainingLauncher(kind="k8s", image="registry.example/ratchet-train:7")
    kwargs = launcher.k8s_run_kwargs()
    pipes_env = {DAGSTER_PIPES_CONTEXT_ENV_VAR: "ctx-b64", DAGSTER_PIPES_MESSAGES_ENV_VAR: "msgs-b64"}
    pod = build_pod_body(
        pod_name=get_pod_name("0123abcd-run", "lora_adapter"),
        image=kwargs["image"],
        command=kwargs["command"],
        env_vars=pipes_env,
        base_pod_meta=kwargs["base_pod_meta"],
        base_pod_spec=kwargs["base_pod_spec"],
    )
    body = ApiClient().sanitize_for_serialization(pod)  # the JSON the Kubernetes API would receive

    assert body["metadata"]["labels"]["app.kubernetes.io/component"] == "training"
    spec = body["spec"]
    assert spec["restartPolicy"] == "Never"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    (container,) = spec["containers"]
    assert container["image"] == "registry.example/ratchet-train:7"
    assert container["command"] == ["python", "-m", TRAIN_MODULE]
    assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (
        env[DAGSTER_PIPES_CONTEXT_ENV_VAR] == "ctx-b64" and env[DAGSTER_PIPES_MESSAGES_ENV_VAR] == "msgs-b64"
    )
    assert "RATCHET_SIGNING_KEY" not in env  # training signs nothing

    # The extras are paths: the pod must mount the same claim at the same place as the code server (Helm values).
    (mount,) = container["volumeMounts"]
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"]}
    helm = yaml.safe_load(HELM.read_text())
    (deployment,) = helm["dagster-user-deployments"]["deployments"]
    (server_mount,) = deployment["volumeMounts"]
    server_claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in deployment["volumes"]}
    assert mount["mountPath"] == server_mount["mountPath"] == env["RATCHET_HOME"]
    assert claims[mount["name"]] == server_claims[server_mount["name"]]
    server_env = {e["name"]: e["value"] for e in deployment["env"]}
    assert server_env["RATCHET_TRAINING_LAUNCHER"] == "k8s"
    assert server_env["RATCHET_ARTIFACTS"].startswith(mount["mountPath"] + "/")
    assert server_env["RATCHET_STUDENT_BASE_MODEL"].startswith(mount["mountPath"] + "/")


def test_k8s_without_image_keeps_the_templates_and_a_missing_template_says_what_to_do(tmp_path: Path) -> None:
    assert TrainingLauncher(kind="k8s").k8s_run_kwargs()["image"] is None  # the template's image stays
    with pytest.raises(dg.Failure, match="pod template"):
        TrainingLauncher(kind="k8s", pod_template=str(tmp_path / "nope.yaml")).k8s_run_kwargs()
    with pytest.raises(dg.Failure, match="RATCHET_TRAINING_LAUNCHER"):
        TrainingLauncher(kind="slurm").client()
