#!/usr/bin/env bash
# Serve the student with vLLM: the base model plus Ratchet's LoRA adapters, loaded at run time by version name.
# Ratchet's evaluation asset and adapter reconciler call POST /v1/load_lora_adapter {lora_name, lora_path} and
# /v1/unload_lora_adapter, exactly as they do against `ratchet student-server` in the embedded default.
#   BASE=/models/Qwen2.5-0.5B-Instruct PORT=8102 API_KEY=... infra/vllm/launch.sh
# Then point the gateway at it: RATCHET_STUDENT_BASE_URL=http://HOST:8102/v1 RATCHET_STUDENT_API_KEY=...
#
# Every request is rendered by the base's own chat template (Ratchet trains on the same render). Tool calls come
# back as `tool_calls` through the tool parser the base's template needs (TOOL_PARSER, default hermes: Qwen2.5
# and Hermes-style templates; the adapter's ratchet_train.json and BOM name it); without a parser the gateway
# reads them from the text itself. CHAT_TEMPLATE: a template file, only for a base whose tokenizer ships none
# (train with the same file in the base folder). MAX_LORA_RANK must be at least the trained rank (32) and equal to
# RATCHET_STUDENT_MAX_LORA_RANK, which the adapter reconciler checks before it loads an adapter here.
# --generation-config vllm: the request's sampling parameters and vLLM's defaults only, not the base's
# generation_config.json (Qwen2.5's sets repetition_penalty 1.1, which would change the greedy answers the night
# certified).
set -euo pipefail
: "${BASE:?set BASE to a local HF model directory (same base the adapters were trained on)}"
export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True   # enables /v1/load_lora_adapter and /v1/unload_lora_adapter
exec vllm serve "$BASE" \
  --host "${HOST:-0.0.0.0}" --port "${PORT:-8102}" \
  --enable-lora --max-loras "${MAX_LORAS:-4}" --max-lora-rank "${MAX_LORA_RANK:-32}" \
  --enable-auto-tool-choice --tool-call-parser "${TOOL_PARSER:-hermes}" \
  ${CHAT_TEMPLATE:+--chat-template "$CHAT_TEMPLATE"} \
  ${MAX_MODEL_LEN:+--max-model-len "$MAX_MODEL_LEN"} \
  --generation-config vllm \
  --max-logprobs 20 \
  ${API_KEY:+--api-key "$API_KEY"} \
  --served-model-name "$(basename "$BASE")"
