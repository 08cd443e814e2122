"""What-if over the status store: the partitions that can change (those with a replica on a broker going down),
read from the store as registrations with their stored effective min ISR and their topic's controller context
(``StatusStore.whatif_inputs``: no documents, no advice), taken down by ``elrwatch.state.whatif.what_if_over``.

`document_lines` turns a report document back into metadata records (the envelope ``elrwatch replay`` reads):
the tests' reference path rebuilds the same part of the cluster through the core with it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from elrwatch.api.heavy import NO_DEADLINE, Deadline
from elrwatch.state.replay import replay_lines
from elrwatch.state.whatif import what_if, what_if_over
from elrwatch.store import StatusStore

if TYPE_CHECKING:
    from elrwatch.api.whatif_index import WhatIfIndex

_ZERO_UUID = base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")
_DIR_UUID = base64.urlsafe_b64encode(bytes(15) + b"\x01").decode().rstrip("=")


def _envelope(rtype: str, version: int, data: dict[str, Any]) -> str:
    return json.dumps({"type": rtype, "version": version, "data": data})


def document_lines(doc: Mapping[str, Any]) -> Iterator[str]:
    """Metadata records (envelope JSON lines) that rebuild the document's cluster, brokers, topics, partitions."""
    cluster = doc.get("cluster") or {}
    for name, level in sorted((cluster.get("features") or {}).items()):
        yield _envelope("FEATURE_LEVEL_RECORD", 0, {"name": name, "featureLevel": int(level)})
    for name, value in sorted((cluster.get("configs") or {}).items()):
        yield _envelope("CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": name, "value": value})
    for b in doc.get("brokers", ()):
        epoch = b.get("epoch") if b.get("epoch") is not None else 0
        yield _envelope("REGISTER_BROKER_RECORD", 3, {
            "brokerId": b["brokerId"], "isMigratingZkBroker": False,
            "incarnationId": b.get("incarnationId") or _ZERO_UUID, "brokerEpoch": epoch, "endPoints": [],
            "features": [], "rack": b.get("rack"), "fenced": bool(b.get("fenced")),
            "inControlledShutdown": bool(b.get("inControlledShutdown")), "logDirs": [],
        })  # fmt: skip
        if not b.get("registered", True):
            yield _envelope("UNREGISTER_BROKER_RECORD", 0, {"brokerId": b["brokerId"], "brokerEpoch": epoch})
    for t in doc.get("topics", ()):
        yield _envelope("TOPIC_RECORD", 0, {"name": t["topic"], "topicId": t["topicId"]})
        for name, value in sorted((t.get("configs") or {}).items()):
            yield _envelope("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": t["topic"], "name": name,
                                                 "value": value})  # fmt: skip
    for p in doc.get("partitions", ()):
        yield _envelope("PARTITION_RECORD", 2, {
            "partitionId": p["partitionId"], "topicId": p["topicId"], "replicas": p["replicas"], "isr": p["isr"],
            "removingReplicas": p.get("removingReplicas") or [], "addingReplicas": p.get("addingReplicas") or [],
            "leader": p["leader"], "leaderRecoveryState": p.get("leaderRecoveryState", 0),
            "leaderEpoch": p.get("leaderEpoch", 0), "partitionEpoch": p.get("partitionEpoch", 0),
            "directories": [_DIR_UUID] * len(p["replicas"]), "eligibleLeaderReplicas": p.get("elr") or [],
            "lastKnownElr": p.get("lastKnownElr") or [],
        })  # fmt: skip


def affected_document(store: StatusStore, down: Sequence[int]) -> dict[str, Any]:
    """The part of the store's state that brokers ``down`` can change, as a report document."""
    partitions = {(p["topicId"], p["partitionId"]): p for p in store.partitions_on_brokers(down)}
    topic_names = sorted({p["topic"] for p in partitions.values()})
    for name in topic_names:  # partition 0 fixes each topic's replication factor (effective min ISR)
        p0 = store.get_partition(name, 0)
        if p0 is not None:
            partitions.setdefault((p0["topicId"], 0), p0)
    wanted = {p["topicId"] for p in partitions.values()}
    summary = store.summary()
    return {
        "cluster": summary["cluster"],
        "brokers": store.list_brokers(counts=False),
        "topics": [t for t in store.list_topics() if t["topicId"] in wanted],
        "partitions": sorted(partitions.values(), key=lambda p: (p["topic"], p["partitionId"])),
    }


def run_whatif(
    store: StatusStore,
    down: Sequence[int],
    *,
    unclean: bool,
    limit: int,
    deadline: Deadline = NO_DEADLINE,
    index: WhatIfIndex | None = None,
) -> dict[str, Any]:
    """``what_if`` over the partitions that have a replica on a broker in ``down``: from ``index`` once it has
    read the store (api/whatif_index.py), else from the store's rows; ``deadline`` stops it (the API's time limit:
    `QueryTimeout`)."""
    deadline.check()
    if index is not None and index.ready.is_set():
        result = index.run(list(down), unclean=unclean, limit=limit, deadline=deadline)
        result["scope"] = "partitions with a replica on a broker that goes down (others cannot change)"
        return result
    brokers, partitions = store.whatif_inputs(down, deadline.check)
    deadline.check()
    result = what_if_over(partitions, brokers, down, unclean=unclean, limit=limit, check=deadline.check)
    result["scope"] = "partitions with a replica on a broker that goes down (others cannot change)"
    return result


def replayed_whatif(store: StatusStore, down: Sequence[int], *, unclean: bool, limit: int) -> dict[str, Any]:
    """The reference path (tests): the affected part of the store rebuilt through the core (`document_lines`,
    replayed) and `what_if` on that state; partition 0 of each topic comes along (it fixes the effective min
    ISR) and is counted when it is not itself affected."""
    doc = affected_document(store, down)
    default_min_isr = int((doc["cluster"] or {}).get("defaultMinIsr") or 1)
    replayer = replay_lines(document_lines(doc), "status-store", default_min_isr=default_min_isr)
    result = what_if(replayer.cluster, down, unclean=unclean, limit=limit)
    lost = sum(replayer.counts.quarantined_by_reason.values())
    if lost:
        result["rebuildQuarantinedRecords"] = lost
    return result
