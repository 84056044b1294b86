"""Request bodies: the subset of OpenAI's chat-completions body the gateway checks before forwarding.

Unknown top-level fields are passed through to the upstream unchanged (``extra="allow"``): OpenAI adds
parameters often and a gateway that rejects them breaks clients. Types of the fields Ratchet reads are checked,
and a wrong one is a 400 that names the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    user: str | None = None
    n: int | None = Field(None, ge=1, le=1)
    metadata: dict[str, str] | None = None


def describe_validation_error(exc: ValidationError) -> str:
    """``field.path: problem; ...`` for the first few errors, with what to do next."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    more = f" (and {len(exc.errors()) - 3} more)" if len(exc.errors()) > 3 else ""
    return (
        "invalid request body: "
        + "; ".join(parts)
        + more
        + ". Fix these fields (OpenAI chat format) and retry."
    )
