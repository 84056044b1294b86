"""Agents that use Ratchet as any outside client does: through the gateway's OpenAI API and the effect gate's API.

Nothing here imports the gateway or the control plane; ``scout`` is the research team (``ratchet scout``).
"""
