"""The chat pipeline behind ``POST /v1/chat/completions`` (``ratchet_gateway.routers.chat``), and behind
``POST /v1/responses`` and ``POST /v1/messages`` as their chat translation (``ratchet_gateway.apis``): route, call
the teacher and/or the student, record the row durably, answer in the caller's API.

The order per request: authenticate -> read the body (size-limited) -> parse and validate it into the internal
chat request -> route by the release manifest -> call the model(s) -> build the ledger row (redacted) ->
``await ledger.append`` (journal group commit) -> release the response. Streaming responses are recorded when the
stream ends, before the final ``[DONE]``; a stream that breaks is recorded with ``truncated=True``. Shadow and
audit calls run off the request path and write ``pair`` rows, as ``ratchet_core.routing.pairs`` decides (an
audited request may also shadow a candidate, compared with the teacher's audit answer). ARCHITECTURE.md, "The
path of a request", follows one request through these parts.

One module per part, each doing one job:

- ``handler``: :class:`ChatHandler`, the orchestrator (entry points, checks, errors);
- ``context``: a request's state, :class:`~ratchet_gateway.chat.context.ChatCall`, one typed record per concern;
- ``formats``: the caller's API on both ends (OpenAI chat completions; the protocol the other APIs' formats in
  ``ratchet_gateway.apis`` implement);
- ``complete``: the non-streamed path; ``relay``: the streamed one (teacher relay, student replay); ``parts``:
  what both use;
- ``student``: the student endpoint behind its circuit breaker, and the cascade; ``student_format``: the body
  the student endpoint gets (the request as the ledger stores it) and its tool calls read from text;
- ``redaction``: the body the student gets and the ledger stores, the client's text put back;
- ``rows``: the ledger rows, their commit, the answer's headers and served metrics;
- ``pairs``: audit and shadow calls off the request path and their pair rows;
- ``completion``: reading a chat completion (message, token counts, confidence);
- ``failures``: 5xx logging, the 500 of a bug, the 499 of a client gone mid-body.
"""

from ratchet_gateway.chat.handler import ChatHandler

__all__ = ["ChatHandler"]
