"""How the pipeline tells its failures: every 5xx is logged with its request id and cause (a bug with its
traceback), an unexpected exception becomes a 500 that asks the client to report the id, and a client that
went away before its body was complete is a 499 (logged, counted, never a 500). :func:`failure` does all of it
for a request that failed before its answer started (the chat pipeline, and the embeddings route)."""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import ClientDisconnect

from ratchet_core.redact import redact_text
from ratchet_gateway.errors import GatewayError, client_closed_error

log = logging.getLogger("ratchet.gateway")


def unexpected(exc: Exception) -> GatewayError:
    """The 500 for a bug (:func:`log_5xx` logs it with its traceback and the request id)."""
    err = GatewayError(
        500,
        "internal gateway error; retry, and report it with the request id if it persists",
        "internal_error",
    )
    err.__cause__ = exc
    return err


def log_client_closed(rid: str) -> None:
    """A 499 (``ratchet_gateway.errors.client_closed_error``): the client's doing, logged without a traceback."""
    log.info("request %s: 499: the client closed the connection before sending its whole body", rid)


def log_5xx(rid: str, err: GatewayError) -> None:
    """Every 5xx answer is logged with its request id and its cause (redacted), so the id a client reports
    finds the log line; a bug (``internal_error``) with its traceback."""
    cause = err.__cause__
    why = redact_text(f" (cause: {type(cause).__name__}: {cause})") if cause is not None else ""
    log.log(
        logging.ERROR if err.code == "internal_error" else logging.WARNING,
        "request %s: %d %s: %s%s",
        rid,
        err.status,
        err.code or err.type,
        redact_text(err.message),
        why,
        exc_info=cause if err.code == "internal_error" else None,
    )


def failure(exc: Exception, t0: float, headers: dict[str, str], metrics: Any, route: str) -> GatewayError:
    """The error a request that failed before its answer started is answered with, logged and counted
    (``ratchet_errors``, ``ratchet_requests_total``, a 499 in ``ratchet_client_closed_total`` of its `route`);
    `headers` (the answer's) get its overhead."""
    rid = headers["x-ratchet-request-id"]
    if isinstance(exc, ClientDisconnect):  # the client left mid-body: its doing, not the gateway's
        err = client_closed_error()
        log_client_closed(rid)
        metrics.client_closed.labels(route).inc()
    else:
        err = exc if isinstance(exc, GatewayError) else unexpected(exc)
        if err.status >= 500:
            log_5xx(rid, err)
            err.message = f"{err.message} (request id {rid})"
        metrics.errors.labels(err.type).inc()
    metrics.requests.labels(headers["x-ratchet-served-by"], str(err.status)).inc()
    headers["x-ratchet-overhead-ms"] = f"{(time.perf_counter() - t0) * 1000:.3f}"
    return err
