"""Operations endpoints: liveness, readiness and the API's own metrics."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from elrwatch.api.dependencies import RegistryDep, SettingsDep, StoreDep
from elrwatch.api.errors import ApiError, problem_responses
from elrwatch.api.models import Health

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness")
def healthz(request: Request) -> dict[str, Any]:
    """The process is up (no store access, no auth); ``tokenRequired``: whether every other endpoint asks for a
    bearer token (the status page says so)."""
    return {"status": "ok", "tokenRequired": bool(request.app.state.token_required)}


@router.get(
    "/readyz",
    response_model=Health,
    responses=problem_responses({503: "Store unreachable, data too old or too far behind the job"}),
    summary="Readiness",
)
def readyz(store: StoreDep, settings: SettingsDep) -> Any:
    """The store answers, was written within ``ready_max_age_seconds``, and was at most
    ``ready_max_store_behind_batches`` micro-batches behind the job's gauges when written."""
    meta = store.get_meta()
    updated = meta["updatedAtMs"]
    age = None if updated is None else round(time.time() - updated / 1000, 3)
    behind = (meta.get("storeBehind") or {}).get("batches")
    limit = settings.ready_max_store_behind_batches
    if limit > 0 and behind is not None and behind > limit:
        raise ApiError(
            503, "Not ready", f"the store was {behind} micro-batches behind the job when last written (limit {limit})"
        )
    if settings.ready_max_age_seconds > 0:
        if age is None:
            raise ApiError(503, "Not ready", "the store has never been written")
        if age > settings.ready_max_age_seconds:
            raise ApiError(
                503, "Not ready", f"store data is {age:.0f} s old (limit {settings.ready_max_age_seconds:.0f} s)"
            )
    return {"status": "ready", "updatedAgeSeconds": age, "storeBehindBatches": behind}


@router.get(
    "/metrics",
    response_class=Response,
    summary="The API's own metrics",
    responses={
        200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Prometheus text format"}
    },
)
def metrics(registry: RegistryDep) -> Response:
    """Request counts and latencies of this API (Prometheus text format)."""
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
