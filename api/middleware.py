"""ASGI middleware of the API: the bearer-token check and the API's own request metrics.

The token check is middleware, not a route dependency, because it also guards what no router declares:
``/openapi.json``, ``/docs`` and unknown paths (a caller without the token learns nothing, not even a 404).
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from elrwatch.api.errors import problem
from elrwatch.state.gauges import METRICS

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Paths served without a token: liveness and the status page shell (it holds no data and asks for the token).
PUBLIC_PATHS = frozenset({"/healthz", "/", "/favicon.ico"})
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def is_public(path: str) -> bool:
    """Whether ``path`` is served without a bearer token."""
    return path in PUBLIC_PATHS or path.startswith("/static/")


class BearerAuth:
    """Answers 401 (problem+json) to a request without ``Authorization: Bearer <token>`` on a non-public path."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def authorized(self, scope: Scope) -> bool:
        """Whether the request carries the configured token (compared in constant time)."""
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_public(scope["path"]) or self.authorized(scope):
            await self.app(scope, receive, send)
            return
        response = problem(401, "Unauthorized", "a valid bearer token is required", scope["path"])
        await response(scope, receive, send)


class RequestMetrics:
    """Counts requests and observes their latency by (method, route, status) in ``registry``."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        requests, latency = METRICS["elrwatch_api_requests"], METRICS["elrwatch_api_request_duration_seconds"]
        self.requests = Counter(requests.name, requests.help, requests.labels, registry=registry)
        self.latency = Histogram(
            latency.name, latency.help, latency.labels, registry=registry, buckets=_LATENCY_BUCKETS
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_wrapper(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            method = method if method in _METHODS else "OTHER"  # bounded label values
            self.requests.labels(method, route, str(status[0])).inc()
            self.latency.labels(method, route).observe(time.perf_counter() - start)
