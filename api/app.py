"""elrwatch's REST API and status page over the status store.

``create_app(settings)`` wires the parts; ``elrwatch api`` runs it with uvicorn:

* ``routers/``: one router per resource (partitions, topics, brokers, summary, recommendations, what-if,
  operations, the status page);
* ``dependencies.py``: what the routers are given (store, settings, summary cache, metrics registry);
* ``middleware.py``: the bearer-token check and the request metrics;
* ``errors.py``: every error is an ``application/problem+json`` document; user input never causes a 500 (bad
  parameters are 422, unknown topics/partitions 404, an unreachable store 503);
* ``openapi.py``: the OpenAPI document with those problem responses.
"""

from __future__ import annotations

import logging
import threading

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry
from sqlalchemy.exc import SQLAlchemyError

from elrwatch.api.dependencies import SummaryCache
from elrwatch.api.errors import install_error_handlers
from elrwatch.api.heavy import HeavyQueries
from elrwatch.api.middleware import BearerAuth, RequestMetrics
from elrwatch.api.openapi import install_openapi
from elrwatch.api.routers import ROUTERS
from elrwatch.api.routers.page import STATIC
from elrwatch.api.settings import Settings
from elrwatch.store import StatusStore

log = logging.getLogger("elrwatch.api")

DESCRIPTION = (
    "Real-time ISR / ELR safety of Kafka (KRaft) partitions (KIP-966), from elrwatch's status store. "
    "Errors are `application/problem+json`. When a bearer token is configured, every endpoint but "
    "`/healthz` (and the static status page shell) requires `Authorization: Bearer <token>`."
)


def ensure_schema(store: StatusStore) -> None:
    """Create the store's schema if it can (a read-only PostgreSQL role cannot: the job creates it)."""
    try:
        store.create_schema()
    except SQLAlchemyError as exc:
        log.warning("could not create the store schema at %s: %s", store.masked_url, type(exc).__name__)


def create_app(settings: Settings | None = None, store: StatusStore | None = None) -> FastAPI:
    """Build the API over ``settings.store`` (or the given store)."""
    settings = settings or Settings()
    if store is None:
        store = StatusStore(settings.store, password_file=settings.store_password_file)
    token = settings.token()
    ensure_schema(store)  # an empty store answers with empty lists, not errors
    app = FastAPI(title="elrwatch API", version="0.1.0", description=DESCRIPTION, docs_url="/docs", redoc_url=None)
    app.state.store = store
    app.state.settings = settings
    app.state.token_required = token is not None  # /healthz and the page say so (never the token)
    app.state.summary_cache = SummaryCache()
    app.state.heavy_queries = HeavyQueries(settings.heavy_query_slots, settings.heavy_query_timeout_seconds)
    app.state.whatif_index = None  # made by the first what-if (it loads numpy: `dependencies.get_whatif_index`)
    app.state.whatif_index_lock = threading.Lock()
    app.state.registry = CollectorRegistry()
    if token is not None:
        app.add_middleware(BearerAuth, token=token)
    app.add_middleware(RequestMetrics, registry=app.state.registry)  # outermost: 401s are counted too
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    install_openapi(app, auth=token is not None)
    return app
