"""elrwatch's REST API and status page over the status store (issue 5).

``create_app(settings)`` builds the FastAPI app; ``elrwatch api`` runs it with uvicorn. Every error is an
``application/problem+json`` document; user input never causes a 500 (bad parameters are 422, unknown
topics/partitions 404, an unreachable store 503).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import importlib.util
import logging
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Annotated, Any

import orjson
from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from elrwatch.api.models import (
    Broker,
    Freshness,
    Health,
    History,
    Partition,
    PartitionPage,
    Problem,
    RecommendationPage,
    Status,
    Summary,
    Topic,
    WhatIf,
)
from elrwatch.api.settings import Settings
from elrwatch.streaming.store import ACTION_STATUSES, SEVERITY, STATUS_ORDER, StatusStore

log = logging.getLogger("elrwatch.api")

STATIC = Path(__file__).parent / "static"
PROBLEM = "application/problem+json"
TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"  # Kafka's legal topic names
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,400}$"  # base64url, no padding
INT32_MAX = 2**31 - 1
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
PUBLIC_PATHS = frozenset({"/healthz", "/", "/favicon.ico"})
_LABEL = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<key>[a-zA-Z_]+)="(?P<value>[^"]*)"\})?$')

TopicParam = Annotated[str, PathParam(pattern=TOPIC_PATTERN, description="Topic name.", examples=["orders"])]
PartitionParam = Annotated[int, PathParam(ge=0, le=INT32_MAX, description="Partition id.", examples=[0])]

CursorParam = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="`nextCursor` of the previous page.")]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class ApiError(Exception):
    """An error answered as a problem document."""

    def __init__(self, status: int, title: str, detail: str | None = None) -> None:
        super().__init__(detail or title)
        self.status, self.title, self.detail = status, title, detail


def problem(status: int, title: str, detail: str | None = None, instance: str | None = None, **extra: Any) -> Response:
    """An ``application/problem+json`` response."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    headers = {"WWW-Authenticate": 'Bearer realm="elrwatch"'} if status == 401 else None
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM, headers=headers)


def encode_cursor(key: tuple[Any, ...]) -> str:
    """Opaque cursor: base64url of the JSON key, no padding."""
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")


def decode_cursor(cursor: str, types: tuple[type, ...]) -> tuple[Any, ...]:
    """Inverse of :func:`encode_cursor`; 422 on anything that is not a cursor this API issued."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError) as exc:
        raise ApiError(422, "Invalid cursor", "cursor is not one this API issued") from exc
    if (
        not isinstance(values, list)
        or len(values) != len(types)
        or not all(type(v) is t for v, t in zip(values, types, strict=True))
        or any(isinstance(v, int) and not 0 <= v <= INT32_MAX for v in values)
        or any(isinstance(v, str) and not re.match(TOPIC_PATTERN, v) for v in values)
    ):
        raise ApiError(422, "Invalid cursor", "cursor is not one this API issued")
    return tuple(values)


def _split_gauges(gauges: dict[str, float]) -> dict[str, dict[str, float]]:
    """``name{key="v"}`` samples grouped as name -> {v: value} (unlabelled samples under key "")."""
    out: dict[str, dict[str, float]] = {}
    for sample, value in gauges.items():
        m = _LABEL.match(sample)
        if m:
            out.setdefault(m["name"], {})[m["value"] or ""] = value
    return out


def _int(value: Any) -> int:
    return int(value or 0)


class _Guard:
    """Pure ASGI middleware: bearer-token check and the API's own request metrics."""

    def __init__(self, app: Any, token: str | None, requests: Counter, latency: Histogram) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.requests, self.latency = requests, latency

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token or b"")
        return False

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

        path = scope["path"]
        try:
            if (
                self.token is not None
                and path not in PUBLIC_PATHS
                and not path.startswith("/static/")
                and not self._authorized(scope)
            ):
                response = problem(401, "Unauthorized", "a valid bearer token is required", path)
                await response(scope, receive, send_wrapper)
            else:
                await self.app(scope, receive, send_wrapper)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope.get("method", "")
            method = method if method in _METHODS else "OTHER"  # bounded label values
            self.requests.labels(method, route, str(status[0])).inc()
            self.latency.labels(method, route).observe(time.perf_counter() - start)


def whatif_available() -> bool:
    """True once ``elrwatch.state.whatif`` (the what-if engine) is part of the build."""
    try:
        return importlib.util.find_spec("elrwatch.state.whatif") is not None
    except ImportError:
        return False


def create_app(settings: Settings | None = None, store: StatusStore | None = None) -> FastAPI:
    """Build the API over ``settings.store`` (or the given store)."""
    settings = settings or Settings()
    if store is None:
        store = StatusStore(settings.store, password_file=settings.store_password_file)
    token = settings.token()
    try:
        store.create_schema()  # an empty store answers with empty lists, not errors
    except SQLAlchemyError as exc:  # e.g. a read-only PostgreSQL role: the job creates the schema
        log.warning("could not create the store schema at %s: %s", store.masked_url, type(exc).__name__)

    app = FastAPI(
        title="elrwatch API",
        version="0.1.0",
        description=(
            "Real-time ISR / ELR safety of Kafka (KRaft) partitions (KIP-966), from elrwatch's status store. "
            "Errors are `application/problem+json`. When a bearer token is configured, every endpoint but "
            "`/healthz` (and the static status page shell) requires `Authorization: Bearer <token>`."
        ),
        docs_url="/docs",
        redoc_url=None,
    )
    app.state.store = store
    app.state.settings = settings
    registry = CollectorRegistry()
    requests = Counter("elrwatch_api_requests", "API requests", ["method", "route", "status"], registry=registry)
    latency = Histogram(
        "elrwatch_api_request_duration_seconds",
        "API request latency",
        ["method", "route"],
        registry=registry,
        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    )
    app.add_middleware(_Guard, token=token, requests=requests, latency=latency)
    summary_cache: dict[str, Any] = {"at": 0.0, "value": None}

    # ------------------------------------------------------------------ errors
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> Response:
        return problem(exc.status, exc.title, exc.detail, request.url.path)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors)
        return problem(422, "Invalid request", detail, request.url.path, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        titles = {404: "Not Found", 405: "Method Not Allowed"}
        return problem(exc.status_code, titles.get(exc.status_code, "HTTP error"), str(exc.detail), request.url.path)

    @app.exception_handler(SQLAlchemyError)
    async def _store_error(request: Request, exc: SQLAlchemyError) -> Response:
        log.error("status store error on %s: %s", request.url.path, type(exc).__name__)
        return problem(503, "Store unavailable", "the status store could not be read", request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s", request.url.path)
        return problem(500, "Internal Server Error", "unexpected error; see the API log", request.url.path)

    # ------------------------------------------------------------------ endpoints
    errors_404 = {404: {"description": "Unknown topic or partition"}}

    @app.get(
        "/v1/partitions",
        response_model=PartitionPage,
        tags=["partitions"],
        summary="List partitions (filters, cursor pagination)",
    )
    def list_partitions(
        status: Annotated[list[Status] | None, Query(description="Only these statuses (repeatable).")] = None,
        topic: Annotated[str | None, Query(pattern=TOPIC_PATTERN, description="Only this topic.")] = None,
        broker: Annotated[
            int | None, Query(ge=0, le=INT32_MAX, description="Only partitions with this replica.")
        ] = None,
        under_min_isr: Annotated[bool | None, Query(description="Only partitions (not) under min ISR.")] = None,
        leaderless: Annotated[bool | None, Query(description="Only partitions (not) without a leader.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
        cursor: CursorParam = None,
    ) -> dict[str, Any]:
        """Partitions ordered by (topic, partition). Like DescribeTopicPartitions, the cursor names the first
        partition of the next page."""
        after = decode_cursor(cursor, (str, int)) if cursor else None
        items, nxt = store.list_partitions(
            status=status,
            topic=topic,
            broker=broker,
            under_min_isr=under_min_isr,
            leaderless=leaderless,
            after=after,
            limit=limit,
        )
        return {"items": items, "nextCursor": encode_cursor(nxt) if nxt else None, "limit": limit}

    async def _call(fn: Callable[..., Any], *args: Any) -> Any:
        """Point reads on SQLite run inline (≈ 0.1 ms with the document and advice rebuilt; after a batch the
        store reloads only the brokers, the cluster and the one topic: cheaper than a thread hop); PostgreSQL
        in the threadpool."""
        if store.is_sqlite:
            return fn(*args)
        return await run_in_threadpool(fn, *args)

    def _not_found(topic: str, partition: int) -> ApiError:
        if store.topic_exists(topic):
            return ApiError(404, "Not Found", f"topic '{topic}' has no partition {partition}")
        return ApiError(404, "Not Found", f"unknown topic '{topic}'")

    @app.get(
        "/v1/partitions/{topic}/{partition}",
        response_model=Partition,
        tags=["partitions"],
        responses=errors_404,
        summary="One partition: registration, status, outlook, recommendation",
    )
    async def get_partition(topic: TopicParam, partition: PartitionParam) -> Response:
        """Full registration, derived status and since when, Kafka's own outlook, and the recommendation with
        its data-loss risk and commands."""
        text = await _call(store.get_partition_json, topic, partition)
        if text is None:
            raise await _call(_not_found, topic, partition)
        return Response(text, media_type="application/json")  # rebuilt from the partition's stored state

    @app.get(
        "/v1/partitions/{topic}/{partition}/history",
        response_model=History,
        tags=["partitions"],
        responses=errors_404,
        summary="A partition's status transitions",
    )
    def get_history(
        topic: TopicParam,
        partition: PartitionParam,
        limit: Annotated[int, Query(ge=1, le=10000, description="At most this many (the newest).")] = 1000,
    ) -> dict[str, Any]:
        """Status transitions, oldest first."""
        transitions = store.history(topic, partition, limit=limit)
        if not transitions and store.get_partition_json(topic, partition) is None:
            raise _not_found(topic, partition)
        return {"topic": topic, "partitionId": partition, "transitions": transitions}

    @app.get("/v1/topics", response_model=list[Topic], tags=["cluster"], summary="Topics")
    def list_topics() -> list[dict[str, Any]]:
        """Every topic with its partition count, replication factor and dynamic configs."""
        return store.list_topics()

    @app.get("/v1/brokers", response_model=list[Broker], tags=["cluster"], summary="Brokers")
    def list_brokers() -> list[dict[str, Any]]:
        """Every broker registration: epoch, fenced, controlled shutdown, rack, state."""
        return store.list_brokers()

    def _summary() -> dict[str, Any]:
        raw = store.summary()
        gauges = raw["gauges"]
        grouped = _split_gauges(gauges)
        by_status = {s: _int(grouped.get("elrwatch_partitions", {}).get(s)) for s in STATUS_ORDER}
        now = time.time()
        last_event, updated = raw["lastEventTimeMs"], raw["updatedAtMs"]
        elr = gauges.get("elrwatch_elr_enabled", raw["cluster"].get("elrEnabled"))
        return {
            "partitions": _int(gauges.get("elrwatch_partition_count", sum(by_status.values()))),
            "topics": _int(gauges.get("elrwatch_topic_count")),
            "partitionsByStatus": by_status,
            "underMinIsr": _int(gauges.get("elrwatch_global_under_min_isr_partitions")),
            "atMinIsr": _int(gauges.get("elrwatch_at_min_isr_partitions")),
            "offline": _int(gauges.get("elrwatch_offline_partitions")),
            "needingAction": sum(by_status[s] for s in ACTION_STATUSES),
            "brokersByState": {k: _int(v) for k, v in grouped.get("elrwatch_brokers", {}).items()},
            "elrEnabled": None if elr is None else bool(elr),
            "derivedFrom": raw["cluster"].get("derivedFrom"),
            "unknownFacts": raw["cluster"].get("unknown") or [],
            "quarantined": raw["quarantined"],
            "freshness": Freshness(
                lastEventTimeMs=last_event,
                dataAgeSeconds=None if last_event is None else round(now - last_event / 1000, 3),
                updatedAtMs=updated,
                updatedAgeSeconds=None if updated is None else round(now - updated / 1000, 3),
                lastBatchId=raw["lastBatchId"],
            ),
            "gauges": gauges,
        }

    @app.get("/v1/summary", response_model=Summary, tags=["cluster"], summary="Gauges and data freshness")
    async def summary() -> Response:
        """The gauge values (monitor-spec §4) and freshness (age of the last applied record). Reads only the
        gauges and meta tables; cached for ``summary_cache_seconds``."""
        now = time.monotonic()
        cached = summary_cache["value"]
        if cached is None or now - summary_cache["at"] >= settings.summary_cache_seconds:
            cached = Summary.model_validate(await _call(_summary)).model_dump_json().encode()
            summary_cache.update(at=now, value=cached)
        return Response(cached, media_type="application/json")

    @app.get(
        "/v1/recommendations",
        response_model=RecommendationPage,
        tags=["partitions"],
        summary="Partitions needing an operator, most severe first",
    )
    def recommendations(
        limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
        cursor: CursorParam = None,
    ) -> dict[str, Any]:
        """Every partition that needs an operator (status MANUAL_ELECTION_REQUIRED … UNDER_MIN_ISR, or a
        recommendation with commands), ordered by severity (monitor-spec §3), then topic and partition."""
        after = decode_cursor(cursor, (int, str, int)) if cursor else None
        docs, nxt = store.recommendations(after=after, limit=limit)
        items = [{**d, "severity": SEVERITY.get(d.get("status", ""), len(STATUS_ORDER))} for d in docs]
        return {"items": items, "nextCursor": encode_cursor(nxt) if nxt else None, "limit": limit}

    @app.get(
        "/v1/whatif",
        response_model=WhatIf,
        tags=["partitions"],
        responses={503: {"description": "What-if analysis not available in this build"}},
        summary="What if these brokers go down now?",
    )
    def whatif(
        down: Annotated[
            str, Query(pattern=r"^\d{1,10}(,\d{1,10}){0,63}$", description="Broker ids, e.g. `1,2`.", examples=["1,2"])
        ],
        unclean: Annotated[
            bool,
            Query(
                description="The brokers restart after an unclean shutdown (losing their ELR seats) "
                "instead of being fenced."
            ),
        ] = False,
        limit: Annotated[int, Query(ge=0, le=10000, description="At most this many partitions per list.")] = 1000,
    ) -> Any:
        """Which partitions would go under min ISR, leaderless, or need an unclean election if the brokers in
        ``down`` failed now, one after another (``elrwatch.state.whatif`` through the controller model, over the
        partitions with a replica on those brokers)."""
        brokers_down = list(dict.fromkeys(int(b) for b in down.split(",")))
        if any(b > INT32_MAX for b in brokers_down):
            raise ApiError(422, "Invalid request", "broker ids must be 32-bit integers")
        if not whatif_available():
            raise ApiError(503, "What-if not available", "what-if not available in this build")
        from elrwatch.api.whatif import run_whatif

        return run_whatif(store, brokers_down, unclean=unclean, limit=limit)

    @app.get("/healthz", response_model=Health, tags=["operations"], summary="Liveness")
    def healthz() -> dict[str, Any]:
        """The process is up (no store access, no auth)."""
        return {"status": "ok"}

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["operations"],
        responses={503: {"description": "Store unreachable or data too old"}},
        summary="Readiness",
    )
    def readyz() -> Any:
        """The store answers and was written within ``ready_max_age_seconds``."""
        meta = store.get_meta()
        updated = meta["updatedAtMs"]
        age = None if updated is None else round(time.time() - updated / 1000, 3)
        if settings.ready_max_age_seconds > 0:
            if age is None:
                raise ApiError(503, "Not ready", "the store has never been written")
            if age > settings.ready_max_age_seconds:
                raise ApiError(
                    503, "Not ready", f"store data is {age:.0f} s old (limit {settings.ready_max_age_seconds:.0f} s)"
                )
        return {"status": "ready", "updatedAgeSeconds": age}

    @app.get(
        "/metrics",
        tags=["operations"],
        response_class=Response,
        summary="The API's own metrics",
        responses={
            200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}
        },
    )
    def metrics() -> Response:
        """Request counts and latencies of this API (Prometheus text format)."""
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    # ------------------------------------------------------------------ status page
    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        return Response(status_code=204)

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    _install_openapi(app, auth=token is not None)
    return app


def _install_openapi(app: FastAPI, *, auth: bool) -> None:
    """OpenAPI with problem+json error responses on every operation (and bearer security when configured)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        components = schema.setdefault("components", {})
        schemas = components.setdefault("schemas", {})
        schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        ref = {"$ref": "#/components/schemas/Problem"}
        if auth:
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
        for path, item in schema.get("paths", {}).items():
            for op in item.values():
                responses = op.setdefault("responses", {})
                codes = {"422": "Invalid parameters", "503": "Status store unavailable"}
                if "{topic}" in path:
                    codes["404"] = "Unknown topic or partition"
                if path == "/v1/whatif":
                    codes["503"] = "What-if not available, or store unavailable"
                if path == "/readyz":
                    codes["503"] = "Store unreachable or data too old"
                if auth and path != "/healthz":
                    codes["401"] = "Missing or wrong bearer token"
                    op["security"] = [{"bearer": []}]
                for code, description in codes.items():
                    responses[code] = {"description": description, "content": {PROBLEM: {"schema": ref}}}
                if path in ("/healthz", "/metrics") or path.endswith(("/topics", "/brokers", "/summary")):
                    responses.pop("422", None)
                if path == "/healthz":
                    responses.pop("503", None)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
