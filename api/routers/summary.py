"""/v1/summary: the gauge values and the data's freshness."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import Response

from elrwatch.api.dependencies import SettingsDep, StoreDep, SummaryCacheDep, read_store
from elrwatch.api.errors import STORE_UNAVAILABLE, problem_responses
from elrwatch.api.models import Freshness, Summary, Trend
from elrwatch.state.gauges import METRICS, sample
from elrwatch.state.status import NEEDS_ATTENTION, STATUSES
from elrwatch.store import StatusStore

router = APIRouter(tags=["cluster"], responses=problem_responses(STORE_UNAVAILABLE))


def by_label(gauges: dict[str, float], name: str) -> dict[str, float]:
    """The stored samples of metric ``name`` by the value of its one label, over the label values the metric
    table names (sorted; values without a sample are left out)."""
    metric = METRICS[name]
    (label,) = metric.labels
    samples = ((value, gauges.get(sample(name, **{label: value}))) for value in sorted(metric.values))
    return {value: found for value, found in samples if found is not None}


def _int(value: Any) -> int:
    return int(value or 0)


def build_summary(store: StatusStore) -> dict[str, Any]:
    """The /v1/summary document from the store's gauges and meta tables."""
    raw = store.summary()
    gauges = raw["gauges"]
    statuses = by_label(gauges, "elrwatch_partitions")
    by_status = {s: _int(statuses.get(s)) for s in STATUSES}
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
        "needingAction": sum(by_status[s] for s in NEEDS_ATTENTION),
        "brokersByState": {k: _int(v) for k, v in by_label(gauges, "elrwatch_brokers").items()},
        "elrEnabled": None if elr is None else bool(elr),
        "defaultMinIsr": raw["cluster"].get("defaultMinIsr"),
        "defaultMinIsrSource": raw["cluster"].get("defaultMinIsrSource"),
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


@router.get("/v1/summary", response_model=Summary, summary="Gauges and data freshness")
async def summary(store: StoreDep, settings: SettingsDep, cache: SummaryCacheDep) -> Response:
    """The gauge values (monitor-spec §4) and freshness (age of the last applied record). Reads only the
    gauges and meta tables; cached for ``summary_cache_seconds``."""
    now = time.monotonic()
    body = cache.body
    if body is None or now - cache.at >= settings.summary_cache_seconds:
        body = Summary.model_validate(await read_store(store, build_summary, store)).model_dump_json().encode()
        cache.at, cache.body = now, body
    return Response(body, media_type="application/json")


@router.get("/v1/trend", response_model=Trend, summary="Under-min-ISR and offline counts over time")
def trend(
    store: StoreDep,
    minutes: Annotated[int, Query(ge=1, le=1440, description="The window: this many minutes up to now.")] = 60,
) -> dict[str, Any]:
    """The under-min-ISR and offline partition counts over the last ``minutes`` (wall time of the job's writes),
    from the store's gauge history: one point each time a count changed, and the count at the window's start."""
    to_ms = int(time.time() * 1000)
    from_ms = to_ms - minutes * 60_000
    series = store.trend(from_ms)
    return {
        "fromMs": from_ms,
        "toMs": to_ms,
        "underMinIsr": series.get("elrwatch_global_under_min_isr_partitions", []),
        "offline": series.get("elrwatch_offline_partitions", []),
    }
