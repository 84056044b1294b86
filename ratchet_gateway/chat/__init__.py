"""The chat pipeline behind ``POST /v1/chat/completions`` (``ratchet_gateway.routers.chat``): route, call the
teacher and/or the student, record the row durably, answer. ``handler`` holds the pipeline; ``context`` the
request's state, one typed record per concern."""

from ratchet_gateway.chat.handler import ChatHandler

__all__ = ["ChatHandler"]
