"""/v1/brokers: every broker registration with its partition counts; is it safe to stop a broker now?"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from elrwatch.api.cursor import encode_cursor
from elrwatch.api.dependencies import StoreDep
from elrwatch.api.errors import STORE_UNAVAILABLE, ApiError, problem_responses
from elrwatch.api.models import Broker, RestartCheck
from elrwatch.api.params import INT32_MAX, CursorParam, decode_cursor

router = APIRouter(tags=["cluster"], responses=problem_responses(STORE_UNAVAILABLE))
BrokerParam = Annotated[int, Path(ge=0, le=INT32_MAX, description="Broker id.", examples=[1])]


@router.get("/v1/brokers", response_model=list[Broker], summary="Brokers")
def list_brokers(store: StoreDep) -> list[dict[str, Any]]:
    """Every broker registration: epoch, fenced, controlled shutdown, rack, state, its partition counts
    (missing from ISR, restart-blocking, restart-offline), and whether its next start will be clean (``nextStart``:
    ``clean`` true, false or null, and its ``basis``)."""
    return store.list_brokers()


@router.get(
    "/v1/brokers/{broker}/restart-check",
    response_model=RestartCheck,
    responses=problem_responses({404: "Unknown broker"}),
    summary="Is it safe to stop this broker now?",
)
def restart_check(
    store: StoreDep,
    broker: BrokerParam,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size of each list.")] = 100,
    blocking_cursor: CursorParam = None,
    offline_cursor: CursorParam = None,
) -> dict[str, Any]:
    """``safe`` when stopping the broker now leaves no partition under min ISR (|ISR| - 1 < effective min ISR
    for a partition whose ISR holds it) and none without an electable leader (it is the only active member of
    ISR ∪ ELR of a partition with a leader); the partitions of each kind, paged by (topic, partition) with their
    own cursors; the reason in words."""
    result = store.restart_check(
        broker,
        blocking_after=decode_cursor(blocking_cursor, (str, int)) if blocking_cursor else None,  # type: ignore[arg-type]
        offline_after=decode_cursor(offline_cursor, (str, int)) if offline_cursor else None,  # type: ignore[arg-type]
        limit=limit,
    )
    if result is None:
        raise ApiError(404, "Not Found", f"unknown broker {broker}")
    for kind in ("blocking", "offline"):
        nxt = result[kind]["nextCursor"]
        result[kind]["nextCursor"] = encode_cursor(nxt) if nxt else None
    return result
