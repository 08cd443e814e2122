"""/v1/recommendations: the partitions that need an operator, most severe first."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from elrwatch.api.cursor import encode_cursor
from elrwatch.api.dependencies import StoreDep
from elrwatch.api.errors import STORE_UNAVAILABLE, problem_responses
from elrwatch.api.models import RecommendationPage
from elrwatch.api.params import CursorParam, decode_cursor
from elrwatch.state.status import SEVERITY, STATUSES

router = APIRouter(tags=["partitions"], responses=problem_responses(STORE_UNAVAILABLE))


@router.get(
    "/v1/recommendations",
    response_model=RecommendationPage,
    summary="Partitions needing an operator, most severe first",
)
def recommendations(
    store: StoreDep,
    limit: Annotated[int, Query(ge=1, le=1000, description="Page size.")] = 100,
    cursor: CursorParam = None,
) -> dict[str, Any]:
    """Every partition that needs an operator (status MANUAL_ELECTION_REQUIRED … UNDER_MIN_ISR, or a
    recommendation with commands), ordered by severity (monitor-spec §3), then topic and partition."""
    after = decode_cursor(cursor, (int, str, int)) if cursor else None
    docs, nxt = store.recommendations(after=after, limit=limit)
    items = [{**d, "severity": SEVERITY.get(d.get("status", ""), len(STATUSES))} for d in docs]
    return {"items": items, "nextCursor": encode_cursor(nxt) if nxt else None, "limit": limit}
