"""/v1/partitions: the partitions, one partition, a partition's status transitions."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from elrwatch.api.cursor import encode_cursor
from elrwatch.api.dependencies import StoreDep, read_store
from elrwatch.api.errors import STORE_UNAVAILABLE, ApiError, problem_responses
from elrwatch.api.models import History, Partition, PartitionPage, Status
from elrwatch.api.params import (
    INT32_MAX,
    TOPIC_PATTERN,
    CursorParam,
    PartitionParam,
    TopicParam,
    decode_cursor,
)
from elrwatch.store import StatusStore

router = APIRouter(tags=["partitions"], responses=problem_responses(STORE_UNAVAILABLE))
ERRORS_404 = problem_responses({404: "Unknown topic or partition"})


def not_found(store: StatusStore, topic: str, partition: int) -> ApiError:
    """The 404 of a missing partition: unknown topic, or a known topic without that partition."""
    if store.topic_exists(topic):
        return ApiError(404, "Not Found", f"topic '{topic}' has no partition {partition}")
    return ApiError(404, "Not Found", f"unknown topic '{topic}'")


@router.get("/v1/partitions", response_model=PartitionPage, summary="List partitions (filters, cursor pagination)")
def list_partitions(
    store: StoreDep,
    status: Annotated[list[Status] | None, Query(description="Only these statuses (repeatable).")] = None,
    topic: Annotated[str | None, Query(pattern=TOPIC_PATTERN, description="Only this topic.")] = None,
    broker: Annotated[int | None, Query(ge=0, le=INT32_MAX, description="Only partitions with this replica.")] = None,
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


@router.get(
    "/v1/partitions/{topic}/{partition}",
    response_model=Partition,
    responses=ERRORS_404,
    summary="One partition: registration, status, outlook, recommendation",
)
async def get_partition(store: StoreDep, topic: TopicParam, partition: PartitionParam) -> Response:
    """Full registration, derived status and since when, Kafka's own outlook, and the recommendation with
    its data-loss risk and commands."""
    text = await read_store(store, store.get_partition_json, topic, partition)
    if text is None:
        raise await read_store(store, not_found, store, topic, partition)
    return Response(text, media_type="application/json")  # rebuilt from the partition's stored state


@router.get(
    "/v1/partitions/{topic}/{partition}/history",
    response_model=History,
    responses=ERRORS_404,
    summary="A partition's status transitions",
)
def get_history(
    store: StoreDep,
    topic: TopicParam,
    partition: PartitionParam,
    limit: Annotated[int, Query(ge=1, le=10000, description="At most this many (the newest).")] = 1000,
) -> dict[str, Any]:
    """Status transitions, oldest first, and what an operator's `elrwatch recover` did (its steps)."""
    transitions = store.history(topic, partition, limit=limit)
    doc = store.get_partition(topic, partition)
    if not transitions and doc is None:
        raise not_found(store, topic, partition)
    recovered = None if doc is None else doc.get("operatorRecovery")
    return {"topic": topic, "partitionId": partition, "transitions": transitions, "operatorRecovery": recovered}
