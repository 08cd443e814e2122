"""/v1/topics: every topic."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from elrwatch.api.dependencies import StoreDep
from elrwatch.api.errors import STORE_UNAVAILABLE, problem_responses
from elrwatch.api.models import Topic

router = APIRouter(tags=["cluster"], responses=problem_responses(STORE_UNAVAILABLE))


@router.get("/v1/topics", response_model=list[Topic], summary="Topics")
def list_topics(store: StoreDep) -> list[dict[str, Any]]:
    """Every topic with its partition count, replication factor and dynamic configs."""
    return store.list_topics()
