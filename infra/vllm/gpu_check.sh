#!/usr/bin/env bash
# The GPU check (not part of `make test`): a night's adapter on the real-architecture test base, served by vLLM
# with Ratchet's flags and by Ratchet's student server, asked the same requests; prompts, answers, tool calls,
# logprobs and the answer format must agree (infra/vllm/gpu_check.py says what is compared and how).
#
#   infra/vllm/gpu_check.sh            # on a host with an NVIDIA GPU, after `make install`
#
# WORK (default ./.gpu-check) keeps the base, the adapter, vLLM's own virtualenv, vllm.log and report.json.
# VLLM_VERSION (default 0.11.0, the image infra/docker-compose.yaml runs) is installed with pip into that
# virtualenv unless WORK/vllm-venv/bin/vllm exists (put a preinstalled one there on a host without network).
# PORT (default 8199): vLLM's port on loopback. Exit status 0: every check passed; 1: see report.json.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-$ROOT/.gpu-check}
PORT=${PORT:-8199}
RATCHET_PYTHON=${RATCHET_PYTHON:-$ROOT/.venv/bin/python}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export PYTHONPATH=$ROOT LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1

if [ ! -x "$WORK/vllm-venv/bin/vllm" ]; then
  python3 -m venv "$WORK/vllm-venv"
  "$WORK/vllm-venv/bin/pip" install --quiet "vllm==${VLLM_VERSION:-0.11.0}"
fi

"$RATCHET_PYTHON" "$ROOT/infra/vllm/gpu_check.py" build "$WORK"

# Ratchet's flags (infra/vllm/launch.sh): runtime LoRA, the trained rank, hermes tool calls, logprobs.
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "$WORK/vllm-venv/bin/vllm" serve "$WORK/base" \
  --host 127.0.0.1 --port "$PORT" --served-model-name base \
  --enable-lora --max-loras 2 --max-lora-rank 32 \
  --enable-auto-tool-choice --tool-call-parser hermes \
  --max-logprobs 20 >"$WORK/vllm.log" 2>&1 &
VLLM_PID=$!
trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$VLLM_PID" 2>/dev/null; then tail -50 "$WORK/vllm.log"; exit 1; fi
  sleep 1
done

"$RATCHET_PYTHON" "$ROOT/infra/vllm/gpu_check.py" compare "$WORK" "http://127.0.0.1:$PORT"
