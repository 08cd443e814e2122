"""The driver's sink (``foreachBatch``): merge the buckets' payloads (`Aggregator`: partition gauges summed,
broker/cluster gauges and documents from bucket 0, topic partition counts summed), serve the gauges, hand the
batch to the store writer (``store_writer.py``: the status store is written behind the batches,
``StatusStore.write_batch(batch_id, ...)``: a re-run batch id is a no-op). The aggregator's
per-bucket values are saved next to Spark's checkpoint, so a restarted driver still sums buckets that have no new
data."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from typing import Any

from elrwatch.state.gauges import (
    Gauges,
    PipelineCounts,
    as_samples,
    decode_gauges,
    encode_gauges,
    key,
    pipeline_gauges,
    sum_gauges,
    with_unregistered_brokers,
)
from elrwatch.state.report import counts_doc
from elrwatch.streaming.memory import gc_paused, trim_after_big_batch
from elrwatch.streaming.payload import concat_payloads, decode_payloads
from elrwatch.streaming.store_writer import FILES, StoreWriter, rows_files

log = logging.getLogger("elrwatch.stream")

DRIVER_FILE = "elrwatch-driver.json"


class Aggregator:
    """Driver-side merge of the buckets' outputs; its per-bucket values survive restarts in a side file."""

    def __init__(self, buckets: int, path: str | None = None) -> None:
        self.buckets = buckets
        self.path = path
        self.bucket_gauges: dict[int, Gauges] = {}
        self.bucket_counts: dict[int, dict[str, Any]] = {}
        self.shared: Gauges = {}
        self.topic_docs: dict[int, dict[str, dict[str, Any]]] = {}
        self.cluster: dict[str, Any] | None = None
        if path and os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                saved = json.load(fh)
            if saved.get("buckets") == buckets:
                self.bucket_gauges = {int(k): _saved_gauges(v) for k, v in saved["bucketGauges"].items()}
                self.bucket_counts = {int(k): v for k, v in saved["bucketCounts"].items()}
                self.shared = _saved_gauges(saved["shared"])
                self.topic_docs = {int(k): v for k, v in saved["topicDocs"].items()}
                self.cluster = saved.get("cluster")

    def save(self, batch_id: int) -> None:
        if not self.path:
            return
        data = {
            "batchId": batch_id,
            "buckets": self.buckets,
            "bucketGauges": {b: encode_gauges(g) for b, g in self.bucket_gauges.items()},
            "bucketCounts": self.bucket_counts,
            "shared": encode_gauges(self.shared),
            "topicDocs": self.topic_docs,
            "cluster": self.cluster,
        }
        directory = os.path.dirname(self.path) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".driver-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, self.path)

    def absorb(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        """Merge one micro-batch's bucket payloads; return the `StatusStore.write_batch` arguments."""
        removed_topics: set[str] = set()
        touched_topics: set[str] = set()
        for p in sorted(payloads, key=lambda p: p["bucket"]):
            b = p["bucket"]
            self.bucket_gauges[b] = decode_gauges(p["gauges"])
            self.bucket_counts[b] = p["counts"]
            docs = self.topic_docs.setdefault(b, {})
            docs.update(p["topics"])
            touched_topics.update(p["topics"])
            for tid in p["removedTopics"]:
                removed_topics.add(tid)
            if b == 0:
                self.shared = decode_gauges(p["shared"])
                self.cluster = p["cluster"]
        for tid in removed_topics:
            for docs in self.topic_docs.values():
                docs.pop(tid, None)
        topics = [self.topic_doc(tid) for tid in sorted(touched_topics - removed_topics)]
        return {
            **concat_payloads(payloads),
            "topics": [t for t in topics if t is not None],
            "removed_topics": sorted(removed_topics),
            "gauges": as_samples(self.gauges()),
            "meta": self.meta(),
        }

    def topic_doc(self, topic_id: str) -> dict[str, Any] | None:
        """The topic's document (from the lowest bucket that has it) with the partition count summed."""
        base = None
        total = 0
        for b in sorted(self.topic_docs):
            doc = self.topic_docs[b].get(topic_id)
            if doc is None:
                continue
            base = base or doc
            total += int(doc.get("partitionCount", 0))
        if base is None:
            return None
        return {**base, "partitionCount": total}

    def counts(self) -> Any:
        total = PipelineCounts()
        for c in self.bucket_counts.values():
            total.merge(PipelineCounts.from_payload(c))
        return total

    def gauges(self) -> Gauges:
        """The cluster's gauges: partition gauges summed over buckets, shared ones from bucket 0, pipeline."""
        out = with_unregistered_brokers({**sum_gauges(self.bucket_gauges.values()), **self.shared})
        out.update(pipeline_gauges(self.counts()))
        return dict(sorted(out.items()))

    def meta(self) -> dict[str, Any]:
        counts = self.counts()
        meta: dict[str, Any] = {"counts": counts_doc(counts)}
        if counts.last_event_ms is not None:
            meta["lastEventTimeMs"] = counts.last_event_ms
        if self.cluster is not None:
            meta["cluster"] = self.cluster
        return meta


def _saved_gauges(saved: Any) -> Gauges:
    """Gauges of the driver file: ``encode_gauges`` rows, or (a file written before gauges were keyed by
    (name, labels)) a map of sample names, whose labels hold no ``,`` or ``"``."""
    if not isinstance(saved, dict):
        return decode_gauges(saved)
    out: Gauges = {}
    for name, value in saved.items():
        metric, _, inner = name.partition("{")
        pairs = (pair.split("=", 1) for pair in inner.rstrip("}").split(",")) if inner else ()
        out[key(metric, **{label: text.strip('"') for label, text in pairs})] = value
    return out


class Sink:
    """foreachBatch: merge the buckets' heads, serve their gauges, then hand the batch to the store writer
    (``store_writer.StoreWriter``: durable in its write-ahead list on return, in the store behind the batches), so
    that the next batch never waits for this one's store write. The batch's health metrics and its log line follow
    its store write."""

    def __init__(self, writer: StoreWriter, aggregator: Aggregator, health: Any) -> None:
        self.writer = writer
        self.aggregator = aggregator
        self.health = health
        writer.on_written = self._written

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        self.writer.spark_committed(batch_id - 1)  # Spark starts a batch once it committed the one before
        rows = batch_df.collect()  # runs the batch: source, route, state (the sink is lazy until here)
        collected = time.monotonic()
        with gc_paused():  # decoding allocates a young object per value and makes no cycles
            bodies = [r["payload"] for r in rows]
            del rows
            payloads, _chunks = decode_payloads(bodies)
            events_before = sum(self.aggregator.counts().events_by_type.values())
            args = self.aggregator.absorb(payloads)
            args[FILES] = rows_files(payloads)
            gauges = self.aggregator.gauges()
            if self.health is not None:
                self.health.gauges_ready(gauges)  # /metrics (alerts) before the store write (REST), not after
            absorbed = time.monotonic()
            info = {
                "started": started,
                "buckets": len(payloads),
                "changed": sum(p.get("partitionCount", 0) for p in payloads),
                "quarantined": sum(p.get("quarantinedCount", 0) for p in payloads),
                "events": args["meta"]["counts"]["events"],
                "inputEvents": args["meta"]["counts"]["events"] - events_before,
                "timing": _timing_summary(payloads, collected - started, absorbed - collected),
            }
            self.writer.submit(batch_id, bodies, args, info)
            del payloads, bodies, args
        trim_after_big_batch(info["changed"])
        self.aggregator.save(batch_id)
        log.info("batch %s: gauges served after %.2fs", batch_id, time.monotonic() - started)

    def _written(self, batch_id: int, written: bool, store_s: float, info: dict[str, Any]) -> None:
        """The writer thread committed a batch (or found it committed): its health metrics and log line."""
        if info.get("recovered"):
            log.info("batch %s: written to the store (%.2fs)%s", batch_id, store_s, "" if written else " (already)")
            return
        if self.health is not None:
            duration = time.monotonic() - info["started"]
            self.health.batch_written(batch_id, None, duration, input_events=info["inputEvents"])
        log.info(
            "batch %s: %d buckets, %d partitions changed, %d quarantined, events=%d, sink %.2fs (%s; store %.2f)%s",
            batch_id,
            info["buckets"],
            info["changed"],
            info["quarantined"],
            info["events"],
            time.monotonic() - info["started"],
            info["timing"],
            store_s,
            "" if written else " (already committed: store unchanged)",
        )


def _timing_summary(payloads: list[dict[str, Any]], run_s: float, merge_s: float) -> str:
    """Where the batch's time went: Spark running the batch (source, route, state: per bucket its load with
    cache hit/miss, apply + documents, state save), merging the payloads on the driver."""
    parts = [f"run {run_s:.2f}"]
    for p in sorted(payloads, key=lambda p: p["bucket"]):
        t = p.get("timing")
        if t:
            parts.append(
                f"b{p['bucket']} {t['cache']} load {t['load']:.2f} process {t['process']:.2f} "
                f"save {t['save']:.2f}{' snapshot' if t['snapshot'] else ''}"
                + (f" rows {t['rows']:.2f}" if t.get("rows") else "")
            )
    parts.append(f"merge {merge_s:.2f}")
    return "; ".join(parts)
