"""Resource ``training``: where the night's LoRA training runs — a Pipes subprocess here, or a Kubernetes GPU pod.

``RATCHET_TRAINING_LAUNCHER`` selects it (``subprocess``, the embedded default | ``k8s``). Both run the same
``python -m ratchet_assets.night.train_job`` through Dagster Pipes, so logs and reported metadata reach the UI
either way, and both hand it the same extras (paths of the training set, output folder and base model):

- ``subprocess``: ``dg.PipesSubprocessClient`` with this Python;
- ``k8s``: ``dagster_k8s.PipesK8sClient`` submits the pod spec of ``infra/k8s/training-job.yaml`` (GPU node
  selector and tolerations, resources, the ``ratchet-data`` PVC at ``/var/lib/ratchet``) with the first container's
  image set to ``RATCHET_TRAINING_IMAGE`` (when set) and its command to the training module. The extras' paths
  must be readable in the pod at the same place, which the shared PVC guarantees.

:meth:`TrainingLauncher.k8s_run_kwargs` is exactly what goes to ``PipesK8sClient.run`` besides the context and
extras, so a test can build the pod it would submit (``dagster_k8s.pipes.build_pod_body``) without a cluster.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dagster as dg

TRAIN_MODULE = "ratchet_assets.night.train_job"
KINDS = ("subprocess", "k8s")
# In the image the template lies at /app/infra/k8s (infra/Dockerfile); in a checkout, at the repository's root.
POD_TEMPLATE = Path(__file__).resolve().parents[2] / "infra" / "k8s" / "training-job.yaml"


def pod_parts(template: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod metadata, pod spec) of a Pod, a Job (its ``spec.template``) or a bare pod spec."""
    kind = template.get("kind")
    if kind == "Job":
        pod = template["spec"]["template"]
        return dict(pod.get("metadata") or {}), dict(pod["spec"])
    if kind == "Pod":
        return dict(template.get("metadata") or {}), dict(template["spec"])
    return {}, dict(template)


class TrainingLauncher(dg.ConfigurableResource):
    """How ``lora_adapter`` launches training. ``kind``: ``subprocess`` | ``k8s``; the rest applies to ``k8s``."""

    kind: str = "subprocess"
    image: str = ""  # the training image; "" = the template's first container's image
    namespace: str = ""  # "" = the namespace the code runs in (in cluster), else "default"
    pod_template: str = ""  # a Job/Pod YAML; "" = infra/k8s/training-job.yaml

    @classmethod
    def from_settings(cls, settings: Any) -> TrainingLauncher:
        return cls(kind=settings.training_launcher, image=settings.training_image or "")

    def _check_kind(self) -> None:
        if self.kind not in KINDS:
            raise dg.Failure(
                f"training launcher {self.kind!r} is not one of {', '.join(KINDS)}: set RATCHET_TRAINING_LAUNCHER"
            )

    def k8s_run_kwargs(self) -> dict[str, Any]:
        """The arguments ``PipesK8sClient.run`` gets besides ``context`` and ``extras``."""
        import yaml

        path = Path(self.pod_template) if self.pod_template else POD_TEMPLATE
        try:
            template = yaml.safe_load(path.read_text())
        except OSError as exc:
            raise dg.Failure(
                f"cannot read the training pod template {path} ({exc.strerror}): set the `training` resource's "
                "pod_template, or use the image built from infra/Dockerfile (it ships infra/k8s/training-job.yaml)"
            ) from None
        meta, spec = pod_parts(template)
        meta.pop("generateName", None)  # the client names the pod after the run and step
        return {
            "image": self.image or None,
            "command": ["python", "-m", TRAIN_MODULE],
            "namespace": self.namespace or None,
            "base_pod_meta": meta,
            "base_pod_spec": spec,
        }

    def client(self) -> dg.PipesClient:
        self._check_kind()
        if self.kind == "k8s":
            from dagster_k8s import PipesK8sClient

            return PipesK8sClient()
        return dg.PipesSubprocessClient()

    def launcher(self, context: dg.AssetExecutionContext):
        """A ``night.adapter.Launcher``: run the training module through Pipes, return (result, reported)."""
        client = self.client()

        def launch(extras: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
            if self.kind == "k8s":
                invocation = client.run(context=context, extras=extras, **self.k8s_run_kwargs())
            else:
                invocation = client.run(
                    command=[sys.executable, "-m", TRAIN_MODULE], context=context, extras=extras
                )
            reported: dict[str, Any] = {}
            for result in invocation.get_results():
                reported.update(dict(getattr(result, "metadata", None) or {}))
            return json.loads(Path(extras["result_path"]).read_text()), reported

        return launch
