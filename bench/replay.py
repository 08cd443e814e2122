"""Benchmark the core: parse + apply records/s on one core, and memory per partition, for a 1M-partition cluster.

Targets: >= 150k records/s, <= 1 KiB per partition. Prints the figures and the ratio to the target.
Run: python bench/replay.py [--partitions 1000000] [--changes 500000] [--brokers 12] [--track-changes]
[--store columnar|objects] (columnar: the store `elrwatch replay` runs; objects: the specification's)
"""

from __future__ import annotations

import argparse
import base64
import gc
import os
import random
import resource
import sys
import time
from collections.abc import Iterator

import orjson

from elrwatch.state.cluster import RUNTIME_STORE, STORES
from elrwatch.state.eventgen import new_partition
from elrwatch.state.gauges import partition_gauges
from elrwatch.state.replay import GC_FREEZE_EVERY, Replayer

PROGRESS_EVERY = 2 * GC_FREEZE_EVERY


def _rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _topic_id(index: int) -> str:
    return base64.urlsafe_b64encode((index + 1).to_bytes(16, "big")).decode().rstrip("=")


def creation_events(partitions: int, per_topic: int, brokers: int) -> Iterator[bytes]:
    """Features, brokers, topics and one PartitionRecord per partition (RF 3, min ISR 2)."""
    offset = 0

    def event(type_name: str, version: int, data: dict) -> bytes:
        nonlocal offset
        line = orjson.dumps(
            {
                "type": type_name,
                "version": version,
                "data": data,
                "offset": offset,
                "timestamp": 1_700_000_000_000 + offset,
            }
        )
        offset += 1
        return line

    yield event("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 26})
    yield event("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1})
    yield event(
        "CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": "2"}
    )
    for broker in range(brokers):
        yield event(
            "REGISTER_BROKER_RECORD",
            3,
            {
                "brokerId": broker,
                "isMigratingZkBroker": False,
                "incarnationId": _topic_id(10**9 + broker),
                "brokerEpoch": 100 + broker,
                "endPoints": [],
                "features": [],
                "rack": None,
                "fenced": False,
                "inControlledShutdown": False,
                "logDirs": [],
            },
        )
    for topic in range((partitions + per_topic - 1) // per_topic):
        topic_id = _topic_id(topic)
        yield event("TOPIC_RECORD", 0, {"name": f"topic-{topic}", "topicId": topic_id})
        for partition in range(min(per_topic, partitions - topic * per_topic)):
            replicas = [(topic + partition + k) % brokers for k in range(3)]
            yield event("PARTITION_RECORD", 2, new_partition(topic_id, partition, replicas, replicas, replicas[0]))


def change_lines(count: int, partitions: int, per_topic: int, brokers: int, seed: int) -> list[bytes]:
    """ISR shrink/expand PartitionChangeRecords on random partitions (pre-generated, not timed)."""
    rng = random.Random(seed)
    topics = (partitions + per_topic - 1) // per_topic
    out = []
    for index in range(count):
        topic = rng.randrange(topics)
        partition = rng.randrange(min(per_topic, partitions - topic * per_topic))
        replicas = [(topic + partition + k) % brokers for k in range(3)]
        out.append(
            orjson.dumps(
                {
                    "type": "PARTITION_CHANGE_RECORD",
                    "version": 2,
                    "data": {
                        "partitionId": partition,
                        "topicId": _topic_id(topic),
                        "isr": replicas[: rng.randint(1, 3)],
                    },
                    "timestamp": 1_800_000_000_000 + index,
                }
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1_000_000)
    parser.add_argument("--per-topic", type=int, default=1000)
    parser.add_argument("--changes", type=int, default=500_000)
    parser.add_argument("--brokers", type=int, default=12)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--track-changes",
        action="store_true",
        help="keep the changed-partition and status-transition bookkeeping the streaming job drains "
        "(elrwatch replay runs without it)",
    )
    parser.add_argument("--store", choices=STORES, default=RUNTIME_STORE, help="the partition store")
    args = parser.parse_args()

    print(
        f"elrwatch bench/replay: {args.partitions:,} partitions, {args.changes:,} changes, {args.brokers} brokers, "
        f"the {args.store} store, change tracking "
        f"{'on (as the streaming job)' if args.track_changes else 'off (as elrwatch replay)'}",
        file=sys.stderr,
    )
    # Input lines are generated before timing: the figure is the core's parse + apply, not the generator's.
    creation = list(creation_events(args.partitions, args.per_topic, args.brokers))
    changes = change_lines(args.changes, args.partitions, args.per_topic, args.brokers, args.seed)
    gc.collect()
    rss_before = _rss_bytes()
    replayer = Replayer(track_changes=args.track_changes, store=args.store)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    created = len(creation)
    for start in range(0, created, PROGRESS_EVERY):
        replayer.feed_lines(creation[start : start + PROGRESS_EVERY], "create", first_seq=start + 1)
        print(f"  created {min(start + PROGRESS_EVERY, created):,} records", file=sys.stderr)
    cpu1 = time.process_time()
    gc.freeze()
    rss_state = _rss_bytes() - rss_before
    replayer.feed_lines(changes, "changes")
    cpu2, wall2 = time.process_time(), time.perf_counter()
    assert not replayer.quarantined, replayer.quarantined[:3]
    partitions = replayer.cluster.partition_count
    total = created + len(changes)
    rate = total / (cpu2 - cpu0)
    per_partition = rss_state / partitions
    print(f"creation : {created:,} records in {cpu1 - cpu0:.1f} s CPU ({created / (cpu1 - cpu0):,.0f} records/s)")
    print(
        f"changes  : {len(changes):,} records in {cpu2 - cpu1:.1f} s CPU ({len(changes) / (cpu2 - cpu1):,.0f} records/s)"
    )
    print(
        f"overall  : {rate:,.0f} records/s CPU ({total / (wall2 - wall0):,.0f}/s wall); target 150,000 -> ratio {rate / 150_000:.2f}"
    )
    print(
        f"memory   : {rss_state / 2**20:,.0f} MiB RSS for {partitions:,} partitions = {per_partition:,.0f} B/partition; "
        f"target 1024 -> ratio {per_partition / 1024:.2f}"
    )
    # A fence re-derives every partition of the broker (their status, audit and insight contributions), then the
    # streaming job reads the bucket's gauges once per micro-batch: both must stay cheap at 1M partitions.
    cluster = replayer.cluster
    index_cpu = time.process_time()
    if args.store == "objects":
        cluster.partitions.index_brokers()  # type: ignore[attr-defined]  # built once after loading, off the path
    fence = orjson.dumps(
        {
            "type": "FENCE_BROKER_RECORD",
            "version": 0,
            "data": {"id": 0, "epoch": 100},
            "timestamp": 1_800_000_000_000 + args.changes,
        }
    )
    cpu3 = time.process_time()
    replayer.feed_lines([fence], "fence")
    cpu4 = time.process_time()
    timings = []
    for _ in range(3):  # the best of three: a garbage collection may land in one
        started = time.process_time()
        gauges = partition_gauges(cluster)
        timings.append(time.process_time() - started)
    touched = len(cluster.partitions_with(0))
    print(
        f"fence    : broker 0 fenced, {touched:,} partitions re-derived in {cpu4 - cpu3:.2f} s CPU "
        f"(broker index built in {cpu3 - index_cpu:.2f} s)"
    )
    print(f"gauges   : {len(gauges):,} samples in {1000 * min(timings):.1f} ms CPU")
    print(f"peak RSS : {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
