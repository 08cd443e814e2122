"""/v1/brokers: every broker registration."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from elrwatch.api.dependencies import StoreDep
from elrwatch.api.models import Broker

router = APIRouter(tags=["cluster"])


@router.get("/v1/brokers", response_model=list[Broker], summary="Brokers")
def list_brokers(store: StoreDep) -> list[dict[str, Any]]:
    """Every broker registration: epoch, fenced, controlled shutdown, rack, state."""
    return store.list_brokers()
