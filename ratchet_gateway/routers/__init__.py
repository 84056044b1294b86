"""The gateway's HTTP routes, one module per concern; ``ratchet_gateway.app.create_app`` includes them all.

- ``chat``: ``POST /v1/chat/completions`` (the data plane's hot path: ``ROUTE``, added to the app's own route
  table, see there);
- ``models``: ``GET /v1/models``;
- ``health``: ``GET /healthz``, ``/readyz``, ``/metrics``;
- ``admin``: ``POST /ratchet/admin/student-disabled``, ``/ratchet/admin/pin`` (safety switches only);
- ``receipts``: ``GET /ratchet/receipts/{day}``, ``/ratchet/receipts/{day}/proof/{request_id}``,
  ``/ratchet/public-key``;
- ``proofs``: ``GET /ratchet/proofs/{version}/{request_id}`` (and ``POST /ratchet/proofs/{version}`` with
  ``{"request_id"}``: by request id, the caller's own requests only), ``GET /ratchet/boms/{version}``.
- ``model_apis``: ``POST /v1/responses`` (OpenAI Responses), ``POST /v1/messages`` (Anthropic Messages),
  ``POST /v1/embeddings``, handed to the handlers ``create_app`` builds (``ratchet_gateway.apis``);
- ``feedback``: ``POST /ratchet/feedback``, ``POST /ratchet/feedback:batch``, ``GET /ratchet/feedback/{id}``
  (what an application says about answers: metrics, comments, demonstrations);
- ``dashboard``: ``GET /ratchet/dashboard`` (the app owner's page, static files in ``dashboard_static``) and
  ``GET /ratchet/dashboard/data`` (the caller's tasks, evidence and spend per day);
- ``pages``: ``GET /`` (the landing page) and ``GET /ratchet/serving`` (its keyed data), ``GET /ratchet/scout``
  (Scout's page) and ``GET /ratchet/scout/team`` (what its agents send); static files in ``pages_static``.

Every other module has an ``APIRouter`` (``ROUTERS``). Routers are thin: they take the gateway state and the caller from ``ratchet_gateway.deps``, raise
``GatewayError`` for every failure (the app answers it in OpenAI's shape) and build responses with
``ratchet_gateway.responses``. They never import the app factory.
"""

from ratchet_gateway.routers import (
    admin,
    chat,
    dashboard,
    feedback,
    health,
    model_apis,
    models,
    pages,
    proofs,
    receipts,
)

CHAT_ROUTE = chat.ROUTE
ROUTERS = (
    models.router,
    model_apis.router,
    health.router,
    admin.router,
    receipts.router,
    proofs.router,
    feedback.router,
    dashboard.router,
    pages.router,
)
