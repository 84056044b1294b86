"""The model APIs besides OpenAI's chat completions, so an app or agent needs one base URL for everything:

- ``POST /v1/responses`` (OpenAI's Responses API: the Agents SDK, the Vercel AI SDK, LangChain with
  ``use_responses_api``): :data:`~ratchet_gateway.apis.responses_format.RESPONSES`, a format of the chat pipeline;
  ``responses_request`` translates the request, ``responses_format`` writes the answer and the typed event stream;
- ``POST /v1/messages`` (Anthropic's Messages API: the Anthropic SDKs, Claude Code):
  :data:`~ratchet_gateway.apis.messages_format.MESSAGES`, likewise (``messages_request``, ``messages_format``);
- ``POST /v1/embeddings``: :class:`~ratchet_gateway.apis.embeddings.Embeddings`, passed to the configured embedding
  model, logged and priced, never distilled (not the chat pipeline);
- ``wire``: what they share (server-sent events, ids, content in chat's shape, their 400s).

A Responses or Messages request goes through the chat pipeline (``ratchet_gateway.chat``) as its chat translation:
routing, the student and its answer-contract guard, PII redaction, the ledger row (its ``api`` column names the
API), audits and shadows, receipts and proofs are the pipeline's. The row stores the translation, so the night
trains and certifies on these requests as on chat ones, and a student trained on chat rows answers them; its
answer is translated back. ARCHITECTURE.md, "The path of a request", follows one request.
"""
