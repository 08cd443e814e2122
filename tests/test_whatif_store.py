"""The API's what-if (the store's registrations taken down by `what_if_over`, equal registrations sharing one pass
through the controller model) equals the core's `what_if` on the replayed cluster with every partition taken
through the controller on its own (``share=False``), partition by partition: on every
simulator scenario, the real-Kafka golden logs and random streams (ELR toggled on and off within them), for random
broker sets, fenced and unclean."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import pytest
from core_events import (
    base_cluster,
    cluster_min_isr,
    config,
    envelope,
    line,
    partition,
    random_stream,
    topic,
    topic_min_isr,
)

from elrwatch.api.whatif import run_whatif
from elrwatch.api.whatif_index import WhatIfIndex
from elrwatch.state.replay import replay_lines
from elrwatch.state.simulator import SCENARIOS, simulate
from elrwatch.state.whatif import CATEGORIES, what_if
from elrwatch.store import StatusStore

DATA = Path(__file__).parent / "data" / "real-kafka"
REAL = sorted(p.parent.name for p in DATA.glob("*/metadata.dump"))
SIM_SHAPE = {"brokers": 5, "topics": 3, "partitions": 6, "replication_factor": 3, "min_isr": 2}


def _simulated(scenario: str) -> list[bytes]:
    out = io.BytesIO()
    simulate(out, **{**SIM_SHAPE, "seed": 11, "scenario": scenario})
    return out.getvalue().splitlines()


def _shared_replicas(seed: int, elr: bool) -> list[str]:
    """Many partitions over the same few replica lists with varied ISR, ELR and leaders: registrations that share
    some fields and not others (what the shared controller pass must tell apart)."""
    rng = random.Random(seed)
    records = [*base_cluster(brokers=(0, 1, 2, 3, 4), elr=elr), cluster_min_isr("2")]
    for t in range(3):
        topic_id = f"AAAAAAAAAAAAAAAAAAAAA{'QgwA'[t]}"
        records += [topic(f"t{t}", topic_id), *([topic_min_isr(f"t{t}", "3")] if t == 2 else [])]
        if t == 1:  # unclean election on: the last ISR member's fence elects another live replica
            records.append(config(2, "t1", "unclean.leader.election.enable", "true"))
        for pid in range(60):
            replicas = rng.choice([(0, 1, 2), (1, 2, 3), (2, 3, 4), (0, 2, 4)])
            isr = [r for r in replicas if rng.random() < 0.6]
            leader = rng.choice(isr) if isr and rng.random() < 0.9 else -1
            min_isr = 3 if t == 2 else 2
            rest = [r for r in replicas if r not in isr]
            elr_members = [r for r in rest if rng.random() < 0.5] if elr and len(isr) < min_isr else []
            records.append(partition(topic_id, pid, replicas, isr, leader, elr=elr_members))
    return [line(envelope(*r)) for r in records]


SOURCES: dict[str, Any] = {
    **{
        f"shared:{seed}:{elr}": (lambda seed=seed, elr=elr: _shared_replicas(seed, elr))
        for seed in (1, 2)
        for elr in (True, False)
    },
    **{f"sim:{name}": (lambda name=name: _simulated(name)) for name in sorted(SCENARIOS)},
    **{f"real:{name}": (lambda name=name: (DATA / name / "metadata.dump").read_text().splitlines()) for name in REAL},
    **{f"random:{seed}": (lambda seed=seed: random_stream(seed, steps=120)) for seed in range(6)},
}


def _broker_sets(brokers: list[int], rng: random.Random) -> list[list[int]]:
    sets = [[b] for b in brokers] + [brokers[:], brokers[::-1]]
    for _ in range(6):
        sets.append(rng.sample(brokers, rng.randint(2, len(brokers))))
    return sets


def _on(entries: list[dict[str, Any]], keys: set[tuple[str, int]]) -> list[dict[str, Any]]:
    return [e for e in entries if (e["topic"], e["partitionId"]) in keys]


def _compare(api: dict[str, Any], core: dict[str, Any], affected: set[tuple[str, int]], where: str) -> None:
    assert api["partitions"] == len(affected), where
    assert api["newlyAffected"] == core["newlyAffected"], where
    assert api.get("unknownBrokers", []) == core.get("unknownBrokers", []), where
    for name in CATEGORIES:
        assert api[name] == _on(core[name], affected), f"{where}: {name}"


def _write_as_batch(store: StatusStore, old: dict[str, Any], new: dict[str, Any], batch_id: int) -> None:
    """Take the store from document ``old`` to ``new`` as the job's writer would: the changed partitions written,
    the missing ones removed, brokers, topics and cluster replaced."""
    before = {(p["topicId"], p["partitionId"]): p for p in old["partitions"]}
    after = {(p["topicId"], p["partitionId"]): p for p in new["partitions"]}
    store.write_batch(
        batch_id,
        partitions=[p for key, p in after.items() if before.get(key) != p],
        removed=[key for key in before if key not in after],
        brokers=new["brokers"],
        topics=new["topics"],
        removed_topics=[
            t["topicId"] for t in old["topics"] if t["topicId"] not in {u["topicId"] for u in new["topics"]}
        ],
        meta={"cluster": new["cluster"]},
    )


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_the_apis_whatif_equals_the_cores_on_every_partition(source: str, tmp_path: Path) -> None:
    """The store read directly and through the index (built on half the stream, then following the store as a
    batch writes the rest: incremental, or whole again after removals) equal the unshared core path."""
    lines = SOURCES[source]()
    half = replay_lines(lines[: len(lines) // 2], source)
    replayer = replay_lines(lines, source)
    cluster = replayer.cluster
    store = StatusStore(f"sqlite:///{tmp_path}/whatif.db")
    try:
        first = half.document(advice=False)
        store.load_document(first, batch_id=1)
        index = WhatIfIndex(store)
        index.refresh()
        _write_as_batch(store, first, replayer.document(advice=False), 2)
        brokers = sorted({r for _, p in cluster.iter_partitions() for r in p.replicas} | set(cluster.brokers))
        assert brokers, source
        rng = random.Random(source)
        compared = 0
        for down in _broker_sets(brokers, rng):
            for unclean in (False, True):
                core = what_if(cluster, down, unclean=unclean, share=False)
                affected = {
                    (t.name, p.partition_id) for t, p in cluster.iter_partitions() if set(down) & set(p.replicas)
                }
                where = f"{source} down={down} unclean={unclean}"
                _compare(run_whatif(store, down, unclean=unclean, limit=100_000), core, affected, where)
                _compare(index.run(down, unclean=unclean, limit=100_000), core, affected, f"{where} (index)")
                compared += len(affected)
        assert compared > 0, source
        if source.startswith("shared"):
            assert not replayer.quarantined, replayer.quarantined[:3]
    finally:
        store.dispose()


def test_the_index_reads_only_what_a_batch_wrote_and_everything_after_removals(tmp_path: Path) -> None:
    lines = _shared_replicas(3, True)
    store = StatusStore(f"sqlite:///{tmp_path}/whatif.db")
    try:
        doc = replay_lines(lines, "shared").document(advice=False)
        store.load_document(doc, batch_id=1)
        index = WhatIfIndex(store)
        assert index.refresh() == len(doc["partitions"]) and index.refresh() == 0
        changed = {**doc["partitions"][5], "isr": doc["partitions"][5]["replicas"][:1]}
        store.write_batch(2, partitions=[changed])
        assert index.refresh() == 1
        store.write_batch(3, removed=[(changed["topicId"], changed["partitionId"])])
        assert index.refresh() == len(doc["partitions"]) - 1  # a removal: read whole again
        assert index.run([0], unclean=False, limit=10)["partitions"] == sum(
            0 in p["replicas"] for p in doc["partitions"] if p is not doc["partitions"][5]
        )
    finally:
        store.dispose()
