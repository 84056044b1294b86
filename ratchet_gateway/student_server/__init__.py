"""Ratchet's local student server: transformers + peft behind an OpenAI-compatible API and vLLM's LoRA admin API."""
