#!/usr/bin/env bash
# Materialise one night against a deployment: its Dagster instance (Postgres, infra/dagster/dagster.yaml), its
# control DB, lake and artifacts, its student endpoint. The run is recorded in the deployment's instance (it
# shows in the UI) and this script exits non-zero when any step fails or a blocking asset check fails
# (`dagster asset materialize` does both), so a CI job running it goes red. A night that ran and certified no
# task exits 0: its signed certificate says "not certified" (an outcome, not a broken night).
#   DAY=2026-01-02 infra/ci/materialize-night.sh          # default: yesterday (UTC)
# Needs: DAGSTER_PG_HOST/PORT/USER/PASSWORD/DB, RATCHET_CONTROL_DB, RATCHET_LAKE, RATCHET_ARTIFACTS,
# RATCHET_SIGNING_KEY, RATCHET_STUDENT_BASE_URL (+ _API_KEY); NIGHT_SELECT narrows the assets (default: the night).
set -euo pipefail
cd "$(dirname "$0")/../.."
DAY="${DAY:-$(date -u -d yesterday +%F)}"
NIGHT_SELECT="${NIGHT_SELECT:-traffic,examples,golden_split,training_set,lora_adapter,evaluation_certificate,bom,daily_receipt}"
export DAGSTER_HOME="${DAGSTER_HOME:-$(mktemp -d)}"
export DAGSTER_STORAGE_DIR="${DAGSTER_STORAGE_DIR:-$DAGSTER_HOME/storage}"
export LITELLM_LOCAL_MODEL_COST_MAP=True
[ -f "$DAGSTER_HOME/dagster.yaml" ] || cp infra/dagster/dagster.yaml "$DAGSTER_HOME/dagster.yaml"
echo "materialising $NIGHT_SELECT for $DAY"
# In-process: one Python for every step (a process per step costs more than most steps here); training still
# runs apart, through Pipes (a subprocess, or the Kubernetes pod of RATCHET_TRAINING_LAUNCHER=k8s).
exec dagster asset materialize -m ratchet_assets.definitions --select "$NIGHT_SELECT" --partition "$DAY" \
  --config-json '{"execution": {"config": {"in_process": {}}}}'
