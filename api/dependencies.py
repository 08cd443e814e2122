"""What the routers are given (FastAPI dependencies): the status store, the settings, the summary cache and the
API's own metrics registry. ``create_app`` puts them on ``app.state``; a test can override any of them with
``app.dependency_overrides``.

The dependencies are ``async`` so that FastAPI resolves them inline, without a threadpool hop per request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool

from elrwatch.api.heavy import HeavyQueries
from elrwatch.api.settings import Settings
from elrwatch.store import StatusStore


@dataclass
class SummaryCache:
    """The last /v1/summary body and when it was built (``time.monotonic()``)."""

    at: float = 0.0
    body: bytes | None = None


async def get_store(request: Request) -> StatusStore:
    """The status store the app reads."""
    return request.app.state.store


async def get_settings(request: Request) -> Settings:
    """The app's settings."""
    return request.app.state.settings


async def get_summary_cache(request: Request) -> SummaryCache:
    """The app's /v1/summary cache."""
    return request.app.state.summary_cache


async def get_registry(request: Request) -> CollectorRegistry:
    """The registry of the API's own request metrics."""
    return request.app.state.registry


async def get_whatif_index(request: Request) -> Any:
    """The what-if's in-memory columns of the store (api/whatif_index.py's WhatIfIndex), made at the first what-if:
    numpy loads only then, not when the API starts."""
    state = request.app.state
    if state.whatif_index is None:
        with state.whatif_index_lock:
            if state.whatif_index is None:
                from elrwatch.api.whatif_index import WhatIfIndex

                state.whatif_index = WhatIfIndex(state.store)
    return state.whatif_index


async def get_heavy_queries(request: Request) -> HeavyQueries:
    """The slots and time limit of heavy queries (api/heavy.py)."""
    return request.app.state.heavy_queries


StoreDep = Annotated[StatusStore, Depends(get_store)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
SummaryCacheDep = Annotated[SummaryCache, Depends(get_summary_cache)]
RegistryDep = Annotated[CollectorRegistry, Depends(get_registry)]
HeavyQueriesDep = Annotated[HeavyQueries, Depends(get_heavy_queries)]
WhatIfIndexDep = Annotated[Any, Depends(get_whatif_index)]  # a WhatIfIndex


async def read_store(store: StatusStore, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a store read from an async endpoint: inline on SQLite (≈ 0.1 ms with the document and advice rebuilt;
    after a batch the store reloads only the brokers, the cluster and the one topic: cheaper than a thread hop),
    in the threadpool on PostgreSQL."""
    if store.is_sqlite:
        return fn(*args)
    return await run_in_threadpool(fn, *args)
