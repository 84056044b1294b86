#!/usr/bin/env bash
# The GPU check (not part of `make test`): a night's adapter served by vLLM with Ratchet's flags and by Ratchet's
# student server on the same base, asked the same requests; prompt token ids, answers, tool calls, logprobs and
# answer formats must agree, and the adapter must load and unload through vLLM's HTTP API
# (infra/vllm/gpu_check.py says what is compared and how).
#
#   infra/vllm/gpu_check.sh                        # the real-architecture test base, built here
#   infra/vllm/gpu_check.sh /models/Qwen2.5-0.5B-Instruct   # a small real model from a local folder
#
# On a host with an NVIDIA GPU, after `make install`. Nothing is downloaded except vLLM itself when it is missing:
# VLLM (default: WORK/vllm-venv/bin/vllm, else `vllm` on PATH, else VLLM_VERSION (default 0.11.0, the image
# infra/docker-compose.yaml runs) pip-installed into WORK/vllm-venv).
# WORK (default ./.gpu-check) keeps the base, the adapter, vllm.log, check.json and report.json (the results).
# PORT (default 8199): vLLM's port on loopback. DTYPE (default float32, as Ratchet's student server computes; set
# bfloat16 where a vLLM build refuses float32, and expect logprob differences). MAX_MODEL_LEN (default: the base's
# context), TRAIN_STEPS, ROWS_PER_TASK and MAX_TOKENS: see gpu_check.py.
# Exit status 0: every check passed; 1: see report.json.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MODEL=${1:-}
if [ -n "$MODEL" ]; then MODEL=$(cd "$MODEL" && pwd); fi
WORK=${WORK:-$ROOT/.gpu-check}
PORT=${PORT:-8199}
RATCHET_PYTHON=${RATCHET_PYTHON:-$ROOT/.venv/bin/python}
export MAX_LORA_RANK=${MAX_LORA_RANK:-32}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
export PYTHONPATH=$ROOT LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1

if [ -z "${VLLM:-}" ]; then
  if [ -x "$WORK/vllm-venv/bin/vllm" ]; then VLLM=$WORK/vllm-venv/bin/vllm
  elif command -v vllm >/dev/null; then VLLM=$(command -v vllm)
  else
    python3 -m venv "$WORK/vllm-venv"
    "$WORK/vllm-venv/bin/pip" install --quiet "vllm==${VLLM_VERSION:-0.11.0}"
    VLLM=$WORK/vllm-venv/bin/vllm
  fi
fi

"$RATCHET_PYTHON" "$ROOT/infra/vllm/gpu_check.py" build "$WORK" "$MODEL"
BASE=${MODEL:-$WORK/base}

# Ratchet's flags (infra/vllm/launch.sh): runtime LoRA, the trained rank, hermes tool calls, the model's own
# sampling defaults off, logprobs.
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True "$VLLM" serve "$BASE" \
  --host 127.0.0.1 --port "$PORT" --served-model-name base \
  --enable-lora --max-loras 2 --max-lora-rank "$MAX_LORA_RANK" \
  --enable-auto-tool-choice --tool-call-parser hermes \
  --generation-config vllm --dtype "${DTYPE:-float32}" \
  ${MAX_MODEL_LEN:+--max-model-len "$MAX_MODEL_LEN"} \
  --max-logprobs 20 >"$WORK/vllm.log" 2>&1 &
VLLM_PID=$!
trap 'kill "$VLLM_PID" 2>/dev/null || true' EXIT
for _ in $(seq 900); do
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$VLLM_PID" 2>/dev/null; then tail -50 "$WORK/vllm.log"; exit 1; fi
  sleep 1
done

"$RATCHET_PYTHON" "$ROOT/infra/vllm/gpu_check.py" compare "$WORK" "http://127.0.0.1:$PORT"
