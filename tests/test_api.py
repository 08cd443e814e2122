"""The REST API (api/app.py) on a store filled from `elrwatch replay` of a small scenario."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from core_events import partition
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from elrwatch.api.app import create_app
from elrwatch.api.cursor import encode_cursor
from elrwatch.api.params import decode_cursor
from elrwatch.api.settings import Settings
from elrwatch.cli import app as cli_app
from elrwatch.state.replay import replay_lines
from elrwatch.state.status import SEVERITY
from elrwatch.state.whatif import CATEGORIES, what_if
from elrwatch.store import StatusStore
from elrwatch.store.schema import STORE_BEHIND, UPDATED_AT_MS

PROBLEM = "application/problem+json"
T0 = 1732100000000
IDS = {
    "orders": "Yk3R8bYFQxGk1Ggd1vQ2Aw",
    "payments": "pX2mQz5TQ1aY8fKd0cLw9g",
    "audit-log": "c9Vb3nM2R4uT6hJk8LqZ1w",
    "ledger": "Lq7Ts2VbRk6Wn1Xc4Zp8Yw",
}


def _uuid(n: int) -> str:
    """Kafka's Uuid text form: url-safe base64 of 16 bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.UUID(int=n << 64 | n).bytes).decode().rstrip("=")


def scenario_lines(t0: int = T0) -> list[str]:
    """Envelope lines: 4 brokers, 3 topics, then failures that leave partitions in several statuses."""
    records: list[tuple[str, int, dict[str, Any]]] = [
        ("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 26}),
        ("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1}),
        ("CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas", "value": "2"}),
    ]
    for b in range(4):
        records.append(
            (
                "REGISTER_BROKER_RECORD",
                3,
                {
                    "brokerId": b,
                    "isMigratingZkBroker": False,
                    "incarnationId": _uuid(b + 1),
                    "brokerEpoch": 100 + b,
                    "endPoints": [],
                    "features": [],
                    "rack": f"rack-{'abc'[b % 3]}",
                    "fenced": True,
                    "inControlledShutdown": False,
                    "logDirs": [],
                },
            )
        )
        records.append(("UNFENCE_BROKER_RECORD", 0, {"id": b, "epoch": 100 + b}))
    layout = {
        "orders": [[0, 1, 2], [1, 2, 0], [2, 0, 1]],
        "payments": [[1, 3, 0], [0, 2, 1], [2, 0, 3]],
        "audit-log": [[3]],
        "ledger": [[3, 0]],
    }
    for topic, parts in layout.items():
        records.append(("TOPIC_RECORD", 0, {"name": topic, "topicId": IDS[topic]}))
        for pid, replicas in enumerate(parts):
            records.append(partition(IDS[topic], pid, replicas, elr=[], last_known_elr=[]))  # all in sync
    # broker 1 dies: shrink ISRs (orders-0 at min ISR, orders-1 under min ISR with broker 0 in the ELR)
    records += [
        ("FENCE_BROKER_RECORD", 0, {"id": 1, "epoch": 101}),
        ("PARTITION_CHANGE_RECORD", 2, {"partitionId": 0, "topicId": IDS["orders"], "isr": [0, 2]}),
        ("PARTITION_CHANGE_RECORD", 2, {"partitionId": 1, "topicId": IDS["orders"], "isr": [2, 0], "leader": 2}),
        (
            "PARTITION_CHANGE_RECORD",
            2,
            {"partitionId": 1, "topicId": IDS["orders"], "isr": [2], "eligibleLeaderReplicas": [0]},
        ),
        ("PARTITION_CHANGE_RECORD", 2, {"partitionId": 1, "topicId": IDS["payments"], "isr": [0, 2]}),
        # broker 3 dies: audit-log-0 (only replica) loses its leader; payments-0 loses everyone
        ("FENCE_BROKER_RECORD", 0, {"id": 3, "epoch": 103}),
        ("PARTITION_CHANGE_RECORD", 2, {"partitionId": 0, "topicId": IDS["audit-log"], "leader": -1}),
        (
            "PARTITION_CHANGE_RECORD",
            2,
            {"partitionId": 0, "topicId": IDS["payments"], "isr": [0], "leader": 0, "eligibleLeaderReplicas": []},
        ),
        (
            "PARTITION_CHANGE_RECORD",
            2,
            {
                "partitionId": 0,
                "topicId": IDS["payments"],
                "isr": [],
                "leader": -1,
                "eligibleLeaderReplicas": [],
                "lastKnownElr": [0],
            },
        ),
        # ledger-0 lost both replicas with ISR and ELR empty and no last known leader: manual election
        (
            "PARTITION_CHANGE_RECORD",
            2,
            {
                "partitionId": 0,
                "topicId": IDS["ledger"],
                "isr": [],
                "leader": -1,
                "eligibleLeaderReplicas": [],
                "lastKnownElr": [],
            },
        ),
        # payments-2: unclean election left it RECOVERING
        (
            "PARTITION_CHANGE_RECORD",
            2,
            {"partitionId": 2, "topicId": IDS["payments"], "isr": [2], "leader": 2, "leaderRecoveryState": 1},
        ),
    ]
    lines = []
    for offset, (rtype, version, data) in enumerate(records):
        lines.append(
            json.dumps(
                {"type": rtype, "version": version, "data": data, "offset": offset, "timestamp": t0 + offset * 1000}
            )
        )
    lines.insert(5, "{not json")  # quarantined, counted
    # broker 1's agent: no .kafka_cleanshutdown in its log dir (it was killed): its next start is unclean
    report = {"brokerId": 1, "registrationEpoch": 101, "cleanShutdownEpoch": None, "logDirs": 1, "logDirsWithFile": 0}
    lines.append(json.dumps({"type": "CLEAN_SHUTDOWN_RECORD", "version": 0, "data": report, "timestamp": t0}))
    return lines


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    doc = replay_lines(scenario_lines(), "scenario.jsonl").document(advice=True)
    statuses = {p["status"] for p in doc["partitions"]}
    assert len(statuses) >= 4, statuses  # the scenario exercises several statuses
    return doc


@pytest.fixture()
def store(tmp_path: Path, document: dict[str, Any]) -> Iterator[StatusStore]:
    s = StatusStore(f"sqlite:///{tmp_path}/api.db")
    s.load_document(document, batch_id=1)
    yield s
    s.dispose()


@pytest.fixture()
def client(store: StatusStore) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(store=str(store.url)), store=store)) as c:
        yield c


def _summary_fields(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in ("outlook", "recommendation", "violations", "lastPosition")}


def _walk(client: TestClient, url: str, **params: Any) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get(url, params=q)
        assert r.status_code == 200, r.text
        body = r.json()
        items.extend(body["items"])
        cursor = body["nextCursor"]
        if cursor is None:
            return items


def test_list_partitions_pages_through_everything_in_order(client: TestClient, document: dict) -> None:
    items = _walk(client, "/v1/partitions", limit=2)
    assert items == [_summary_fields(p) for p in document["partitions"]]


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"status": "UNDER_MIN_ISR"}, lambda p: p["status"] == "UNDER_MIN_ISR"),
        ({"status": ["AT_MIN_ISR", "HEALTHY"]}, lambda p: p["status"] in ("AT_MIN_ISR", "HEALTHY")),
        ({"topic": "payments"}, lambda p: p["topic"] == "payments"),
        ({"broker": 3}, lambda p: 3 in p["replicas"]),
        ({"under_min_isr": "true"}, lambda p: p["underMinIsr"]),
        ({"leaderless": "true"}, lambda p: p["leaderless"]),
        ({"leaderless": "false", "broker": 0}, lambda p: not p["leaderless"] and 0 in p["replicas"]),
    ],
)
def test_partition_filters(client: TestClient, document: dict, params: dict, keep: Any) -> None:
    expected = [_summary_fields(p) for p in document["partitions"] if keep(p)]
    assert expected, "the scenario must have partitions for every filter"
    assert _walk(client, "/v1/partitions", limit=1, **params) == expected


def test_partition_detail_is_the_full_document(client: TestClient, document: dict) -> None:
    for p in document["partitions"]:
        r = client.get(f"/v1/partitions/{p['topic']}/{p['partitionId']}")
        assert r.status_code == 200
        assert r.json() == p  # exactly what the job (here: replay) wrote, advice included when built


def test_unknown_topic_and_partition_are_404_problems(client: TestClient) -> None:
    r = client.get("/v1/partitions/nope/0")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM
    assert r.json()["detail"] == "unknown topic 'nope'"
    r = client.get("/v1/partitions/orders/99")
    assert r.status_code == 404 and "no partition 99" in r.json()["detail"]
    assert client.get("/v1/partitions/orders/99/history").status_code == 404
    r = client.get("/no/such/route")
    assert r.status_code == 404 and r.headers["content-type"] == PROBLEM


@pytest.mark.parametrize(
    "url",
    [
        "/v1/partitions?status=BROKEN",
        "/v1/partitions?limit=0",
        "/v1/partitions?limit=100000",
        "/v1/partitions?broker=-1",
        "/v1/partitions?broker=99999999999999999999",
        "/v1/partitions?under_min_isr=maybe",
        "/v1/partitions?topic=bad%20name",
        "/v1/partitions?cursor=%%%",
        "/v1/partitions?cursor=" + encode_cursor((1, "x")),
        "/v1/recommendations?cursor=" + encode_cursor(("orders", 1)),
        "/v1/partitions/orders/-1",
        "/v1/partitions/orders/abc",
        "/v1/partitions/orders/99999999999",
        "/v1/partitions/bad%00topic/0",
        "/v1/whatif",
        "/v1/whatif?down=",
        "/v1/whatif?down=1,,2",
        "/v1/whatif?down=99999999999",
    ],
)
def test_bad_parameters_are_422_problems(client: TestClient, url: str) -> None:
    r = client.get(url)
    assert r.status_code == 422, r.text
    assert r.headers["content-type"] == PROBLEM
    body = r.json()
    assert body["status"] == 422 and body["title"]


def test_cursor_round_trip() -> None:
    assert decode_cursor(encode_cursor(("orders", 7)), (str, int)) == ("orders", 7)


def test_history_lists_transitions_oldest_first(client: TestClient, store: StatusStore, document: dict) -> None:
    p = next(x for x in document["partitions"] if x["topic"] == "orders" and x["partitionId"] == 1)
    t = [
        {
            "topic": "orders",
            "topicId": p["topicId"],
            "partitionId": 1,
            "from": a,
            "to": b,
            "atMs": T0 + i,
            "offset": 40 + i,
            "position": f"ev/0@{i}",
        }
        for i, (a, b) in enumerate([("HEALTHY", "AT_MIN_ISR"), ("AT_MIN_ISR", "UNDER_MIN_ISR")])
    ]
    assert store.write_batch(2, transitions=t)
    r = client.get("/v1/partitions/orders/1/history")
    assert r.status_code == 200
    body = r.json()
    assert [(x["from"], x["to"], x["offset"], x["batchId"]) for x in body["transitions"]] == [
        ("HEALTHY", "AT_MIN_ISR", 40, 2),
        ("AT_MIN_ISR", "UNDER_MIN_ISR", 41, 2),
    ]
    assert client.get("/v1/partitions/orders/0/history").json()["transitions"] == []


def _restart_oracle(document: dict, broker: int) -> tuple[list[tuple[str, int]], list[tuple[str, int]], int]:
    """From the partition documents alone (the monitor's definitions, as DescribeTopicPartitions and
    DescribeCluster would give them): restart-blocking and restart-offline partitions, and the missing count."""
    active = {b["brokerId"] for b in document["brokers"] if b["state"] == "active"}
    blocking, offline, missing = [], [], 0
    for p in document["partitions"]:
        key = (p["topic"], p["partitionId"])
        if broker in p["isr"] and len(p["isr"]) - 1 < p["effectiveMinIsr"]:
            blocking.append(key)
        if p["leader"] != -1 and {b for b in set(p["isr"]) | set(p["elr"]) if b in active} == {broker}:
            offline.append(key)
        missing += broker in p["replicas"] and broker not in p["isr"]
    return sorted(blocking), sorted(offline), missing


def test_topics_and_brokers(client: TestClient, document: dict) -> None:
    assert client.get("/v1/topics").json() == document["topics"]
    brokers = client.get("/v1/brokers").json()
    counts = ("leaderPartitions", "isrMissingPartitions", "restartBlockingPartitions", "restartOfflinePartitions")
    assert [{k: v for k, v in b.items() if k not in counts} for b in brokers] == document["brokers"]
    for b in brokers:
        blocking, offline, missing = _restart_oracle(document, b["brokerId"])
        assert (b["isrMissingPartitions"], b["restartBlockingPartitions"], b["restartOfflinePartitions"]) == (
            missing,
            len(blocking),
            len(offline),
        )
        assert b["leaderPartitions"] == sum(p["leader"] == b["brokerId"] for p in document["partitions"])
    assert brokers[2]["restartBlockingPartitions"] == 4 and brokers[2]["restartOfflinePartitions"] == 1
    next_start = {b["brokerId"]: b["nextStart"] for b in brokers}
    assert next_start[1]["clean"] is False and "no .kafka_cleanshutdown" in next_start[1]["basis"]  # the agent's
    assert next_start[3]["clean"] is None and "session timeout" in next_start[3]["basis"]  # the metadata's
    assert next_start[0]["clean"] is None and next_start[0]["basis"].startswith("running")
    assert brokers[1]["cleanShutdown"]["logDirsWithFile"] == 0 and brokers[0]["cleanShutdown"] is None


def _walk_restart(client: TestClient, broker: int, kind: str) -> list[tuple[str, int]]:
    keys, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": 1}
        if cursor:
            params[f"{kind}_cursor"] = cursor
        body = client.get(f"/v1/brokers/{broker}/restart-check", params=params).json()
        keys += [(p["topic"], p["partitionId"]) for p in body[kind]["items"]]
        cursor = body[kind]["nextCursor"]
        if cursor is None:
            return keys


def test_restart_check_lists_the_blocking_and_offline_partitions(client: TestClient, document: dict) -> None:
    for broker in range(4):
        body = client.get(f"/v1/brokers/{broker}/restart-check").json()
        blocking, offline, _ = _restart_oracle(document, broker)
        assert (body["blockingCount"], body["offlineCount"]) == (len(blocking), len(offline))
        assert body["safe"] is (not blocking and not offline)
        assert [(p["topic"], p["partitionId"]) for p in body["blocking"]["items"]] == blocking
        assert _walk_restart(client, broker, "blocking") == blocking
        assert _walk_restart(client, broker, "offline") == offline
    body = client.get("/v1/brokers/2/restart-check").json()
    assert body["safe"] is False and body["state"] == "active"
    assert body["reason"] == (
        "stopping broker 2 now leaves 4 partition(s) under min ISR (acks=all writes fail) and 1 partition(s) "
        "without an electable leader (offline)"
    )
    assert [(p["topic"], p["partitionId"]) for p in body["offline"]["items"]] == [("payments", 2)]
    assert body["offline"]["items"][0]["missingReplicas"] == [
        {"brokerId": 0, "cause": "lagging"},
        {"brokerId": 3, "cause": "fenced"},
    ]
    fenced = client.get("/v1/brokers/1/restart-check").json()
    assert fenced["safe"] is True and fenced["reason"] == "broker 1 is fenced: stopping it changes no ISR"


def test_restart_check_of_a_store_without_the_per_broker_gauges_counts_the_partitions(
    tmp_path: Path, document: dict
) -> None:
    """A store written before the per-broker gauges existed: the check counts the partitions it re-derives."""
    older = {**document, "gauges": {k: v for k, v in document["gauges"].items() if "elrwatch_broker_" not in k}}
    store = StatusStore(f"sqlite:///{tmp_path}/old.db")
    try:
        store.load_document(older, batch_id=1)
        for broker in range(4):
            blocking, offline, _ = _restart_oracle(document, broker)
            check = store.restart_check(broker, limit=1)
            assert check is not None
            assert (check["blockingCount"], check["offlineCount"]) == (len(blocking), len(offline))
            assert check["safe"] is (not blocking and not offline)
            assert [(p["topic"], p["partitionId"]) for p in check["blocking"]["items"]] == blocking[:1]
        assert store.list_brokers()[2]["restartBlockingPartitions"] is None  # unknown, not 0
    finally:
        store.dispose()


def test_restart_check_errors(client: TestClient) -> None:
    missing = client.get("/v1/brokers/9/restart-check")
    assert missing.status_code == 404 and missing.headers["content-type"] == PROBLEM
    assert missing.json()["detail"] == "unknown broker 9"
    assert client.get("/v1/brokers/2/restart-check", params={"blocking_cursor": "bm90IGEgY3Vyc29y"}).status_code == 422
    assert client.get("/v1/brokers/-1/restart-check").status_code == 422


def test_summary_has_gauges_counters_and_freshness(client: TestClient, document: dict) -> None:
    body = client.get("/v1/summary").json()
    assert body["gauges"] == document["gauges"]
    statuses = [p["status"] for p in document["partitions"]]
    assert body["partitionsByStatus"] == {s: statuses.count(s) for s in SEVERITY}
    assert body["partitions"] == len(document["partitions"])
    assert body["underMinIsr"] == sum(p["underMinIsr"] for p in document["partitions"])
    assert body["offline"] == sum(p["leaderless"] for p in document["partitions"])
    assert body["brokersByState"]["fenced"] == sum(b["state"] == "fenced" for b in document["brokers"])
    cluster = document["cluster"]  # where the min ISR of topics without their own config comes from
    assert (body["defaultMinIsr"], body["defaultMinIsrSource"]) == (
        cluster["defaultMinIsr"],
        cluster["defaultMinIsrSource"],
    )
    fresh = body["freshness"]
    newest = max(p["lastTimestampMs"] for p in document["partitions"])
    assert fresh["lastEventTimeMs"] >= newest
    assert fresh["dataAgeSeconds"] == pytest.approx(time.time() - fresh["lastEventTimeMs"] / 1000, abs=5)
    assert fresh["lastBatchId"] == 1
    assert body["quarantined"]["count"] == document["quarantined"]["count"] >= 1


def test_recommendations_most_severe_first(client: TestClient, document: dict) -> None:
    items = _walk(client, "/v1/recommendations", limit=1)
    severities = [i["severity"] for i in items]
    assert severities == sorted(severities)
    urgent = [p for p in document["partitions"] if SEVERITY[p["status"]] <= SEVERITY["UNDER_MIN_ISR"]]
    got = {(i["topic"], i["partitionId"]) for i in items}
    assert {(p["topic"], p["partitionId"]) for p in urgent} <= got
    assert "HEALTHY" not in {i["status"] for i in items}
    by_key = {(p["topic"], p["partitionId"]): p for p in document["partitions"]}
    for item in items:  # Kafka's outlook and the recommendation come from the partition's document
        assert item["recommendation"] == by_key[item["topic"], item["partitionId"]].get("recommendation")
        assert item["outlook"] == by_key[item["topic"], item["partitionId"]].get("outlook")


@pytest.mark.parametrize("unclean", [False, True])
def test_whatif_matches_the_core_on_the_replayed_cluster(client: TestClient, unclean: bool) -> None:
    r = client.get("/v1/whatif", params={"down": "2,0", "unclean": str(unclean).lower()})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["down"] == [2, 0] and body["unclean"] is unclean
    cluster = replay_lines(scenario_lines(), "scenario.jsonl").cluster
    full = what_if(cluster, [2, 0], unclean=unclean)
    assert body["newlyAffected"] == full["newlyAffected"]
    assert sum(full["newlyAffected"].values()) > 0, "the scenario must make brokers 2,0 matter"
    on_down = {(t.name, p.partition_id) for t, p in cluster.iter_partitions() if {0, 2} & set(p.replicas)}
    for name in CATEGORIES:
        expected = [e for e in full[name] if (e["topic"], e["partitionId"]) in on_down]
        got = [e for e in body[name] if (e["topic"], e["partitionId"]) in on_down]
        assert got == expected, name


def test_health_ready_and_metrics(client: TestClient, store: StatusStore) -> None:
    health = client.get("/healthz").json()
    assert (health["status"], health["tokenRequired"]) == ("ok", False)
    assert client.get("/readyz").status_code == 200
    client.get("/v1/partitions/orders/0")
    text = client.get("/metrics").text
    assert 'route="/v1/partitions/{topic}/{partition}"' in text
    assert "elrwatch_api_request_duration_seconds_bucket" in text
    with store.engine.begin() as conn:  # the job stopped writing an hour ago
        store._meta_put(conn, UPDATED_AT_MS, int(time.time() * 1000) - 3_600_000)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.headers["content-type"] == PROBLEM
    assert "old" in r.json()["detail"]


def test_ready_only_while_the_store_keeps_up_with_the_job(client: TestClient, store: StatusStore) -> None:
    """The job writes the store behind its batches: readiness fails when its last write was too far behind."""
    with store.engine.begin() as conn:
        store._meta_put(conn, STORE_BEHIND, {"batches": 3, "newestBatchId": 12})
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["storeBehindBatches"] == 3
    with store.engine.begin() as conn:
        store._meta_put(conn, STORE_BEHIND, {"batches": 11, "newestBatchId": 40})
    r = client.get("/readyz")
    assert r.status_code == 503 and "11 micro-batches behind" in r.json()["detail"]


def test_unreachable_store_is_503_not_500() -> None:
    settings = Settings(store="postgresql+psycopg://elrwatch:pw@127.0.0.1:1/none")
    with TestClient(create_app(settings)) as c:
        for url in ("/v1/summary", "/v1/partitions", "/v1/partitions/orders/0", "/readyz"):
            r = c.get(url)
            assert r.status_code == 503 and r.headers["content-type"] == PROBLEM, url
            assert "pw" not in r.text
        assert c.get("/healthz").status_code == 200


def test_bearer_token_protects_everything_but_healthz(store: StatusStore, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t0ken-from-file\n")
    settings = Settings(store=str(store.url), api_token_file=token_file)
    with TestClient(create_app(settings, store=store)) as c:
        for url in ("/v1/summary", "/v1/partitions", "/metrics", "/readyz", "/openapi.json", "/v1/brokers"):
            r = c.get(url)
            assert r.status_code == 401 and r.headers["content-type"] == PROBLEM, url
            assert r.headers["www-authenticate"].startswith("Bearer")
            assert c.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.get(url, headers={"Authorization": "Bearer t0ken-from-file"}).status_code == 200
        health = c.get("/healthz")
        assert health.status_code == 200 and health.json()["tokenRequired"] is True  # says so, never the token
        assert "t0ken" not in health.text
        assert c.get("/").status_code == 200  # the page shell holds no data; it asks for the token
        spec = c.get("/openapi.json", headers={"Authorization": "Bearer t0ken-from-file"}).json()
        assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_token_from_environment(store: StatusStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ELRWATCH_API_TOKEN", "env-token")
    with TestClient(create_app(Settings(store=str(store.url)), store=store)) as c:
        assert c.get("/v1/summary").status_code == 401
        assert c.get("/v1/summary", headers={"Authorization": "Bearer env-token"}).status_code == 200


def test_openapi_documents_problems_and_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    detail = spec["paths"]["/v1/partitions/{topic}/{partition}"]["get"]
    assert set(detail["responses"]) >= {"200", "404", "422"}
    assert PROBLEM in detail["responses"]["404"]["content"]
    assert spec["components"]["schemas"]["Partition"]["examples"]
    for path, item in spec["paths"].items():  # every error an operation documents is a problem document
        for op in item.values():
            errors = {code: r for code, r in op["responses"].items() if not code.startswith("2")}
            assert all(PROBLEM in r.get("content", {}) for r in errors.values()), path
            assert ("503" in errors) == (path not in ("/healthz", "/metrics")), path  # every store read can fail
    assert "404" in spec["paths"]["/v1/brokers/{broker}/restart-check"]["get"]["responses"]
    assert "422" not in spec["paths"]["/readyz"]["get"]["responses"]  # no parameters


def test_cli_status_prints_the_store_as_the_replay_document(store: StatusStore, document: dict) -> None:
    result = CliRunner().invoke(cli_app, ["status", "--store", str(store.url), "--compact"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == document


def test_cli_restart_check_from_the_store_and_from_events(
    store: StatusStore, client: TestClient, tmp_path: Path
) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(scenario_lines()) + "\n")
    for broker, code in ((2, 1), (0, 1), (1, 0)):
        from_store = CliRunner().invoke(cli_app, ["restart-check", str(broker), "--store", str(store.url)])
        assert from_store.exit_code == code, from_store.output
        body = json.loads(from_store.stdout)
        api = client.get(f"/v1/brokers/{broker}/restart-check").json()
        for kind in ("blocking", "offline"):  # the API's items are partition summaries: the CLI's, full documents
            body[kind]["items"] = [
                {k: p[k] for k in a} for p, a in zip(body[kind]["items"], api[kind]["items"], strict=True)
            ]
        assert body == api
        replayed = CliRunner().invoke(cli_app, ["restart-check", str(broker), str(events), "--limit", "2"])
        assert replayed.exit_code == code, replayed.output
        again = json.loads(replayed.stdout)
        assert {k: again[k] for k in ("safe", "reason", "blockingCount", "offlineCount")} == {
            k: body[k] for k in ("safe", "reason", "blockingCount", "offlineCount")
        }
        for kind in ("blocking", "offline"):
            keys = [(p["topic"], p["partitionId"]) for p in again[kind]["items"]]
            assert keys == [(p["topic"], p["partitionId"]) for p in body[kind]["items"]][:2]
            if again[kind]["nextCursor"] is not None:  # the API's cursor of the third one
                third = decode_cursor(again[kind]["nextCursor"], (str, int))
                assert third == (body[kind]["items"][2]["topic"], body[kind]["items"][2]["partitionId"])


def test_cli_restart_check_usage_errors(store: StatusStore, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(scenario_lines()) + "\n")
    for args in (
        ["restart-check", "9", "--store", str(store.url)],
        ["restart-check", "9", str(events)],
        ["restart-check", "1", str(events), "--store", str(store.url)],
        ["restart-check", "x"],
        ["restart-check", "1", str(tmp_path / "missing.jsonl")],
        ["restart-check", "1", "--store", f"sqlite:///{tmp_path}/missing.db"],
    ):
        result = CliRunner().invoke(cli_app, args)
        assert result.exit_code == 2, (args, result.output)
    assert "unknown broker 9" in CliRunner().invoke(cli_app, ["restart-check", "9", str(events)]).output


def test_cli_status_fails_in_one_line_and_masks_the_password(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_app, ["status", "--store", f"sqlite:///{tmp_path}/missing.db"])
    assert result.exit_code == 2 and "no status store" in result.output
    result = CliRunner().invoke(cli_app, ["status", "--store", "postgresql+psycopg://u:hunter2@127.0.0.1:1/x"])
    assert result.exit_code == 2
    assert "hunter2" not in result.output and "***" in result.output


def test_api_on_postgresql(document: dict) -> None:
    """The same queries on PostgreSQL (thread-pool path, boolean/tuple filters, cursors)."""
    from test_store import PostgresServer

    from elrwatch.store.schema import metadata

    server = PostgresServer().start()
    try:
        store = StatusStore(server.url, password_file=server.password_file)
        metadata.drop_all(store.engine)
        store.load_document(document, batch_id=1)
        settings = Settings(store=server.url, store_password_file=server.password_file)
        with TestClient(create_app(settings, store=store)) as c:
            assert _walk(c, "/v1/partitions", limit=2) == [_summary_fields(p) for p in document["partitions"]]
            assert _walk(c, "/v1/partitions", limit=1, broker=3, leaderless="true") == [
                _summary_fields(p) for p in document["partitions"] if 3 in p["replicas"] and p["leaderless"]
            ]
            p = document["partitions"][1]
            assert c.get(f"/v1/partitions/{p['topic']}/{p['partitionId']}").json() == p
            assert c.get("/v1/partitions/nope/0").status_code == 404
            assert c.get("/v1/summary").json()["gauges"] == document["gauges"]
            severities = [i["severity"] for i in _walk(c, "/v1/recommendations", limit=1)]
            assert severities and severities == sorted(severities)
            assert c.get("/readyz").status_code == 200
            for broker in range(4):  # per-broker counts and the restart check, on PostgreSQL too
                blocking, offline, missing = _restart_oracle(document, broker)
                b = c.get("/v1/brokers").json()[broker]
                assert (b["isrMissingPartitions"], b["restartBlockingPartitions"]) == (missing, len(blocking))
                assert _walk_restart(c, broker, "blocking") == blocking
                assert _walk_restart(c, broker, "offline") == offline
            under = document["gauges"]["elrwatch_global_under_min_isr_partitions"]
            assert [v for _, v in c.get("/v1/trend").json()["underMinIsr"]] == [under]
            assert c.get("/v1/whatif", params={"down": "1"}).status_code == 200
        store.dispose()
    finally:
        server.stop()


def test_api_on_a_store_the_job_has_not_written_yet(tmp_path: Path) -> None:
    settings = Settings(store=f"sqlite:///{tmp_path}/new/store.db")
    with TestClient(create_app(settings)) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        assert r.status_code == 503 and "never been written" in r.json()["detail"]
        assert c.get("/v1/partitions").json()["items"] == []
        assert c.get("/v1/summary").json()["partitions"] == 0
        assert c.get("/v1/partitions/orders/0").status_code == 404


def test_trend_of_under_min_isr_and_offline_counts(client: TestClient, store: StatusStore, document: dict) -> None:
    under = document["gauges"]["elrwatch_global_under_min_isr_partitions"]
    offline = document["gauges"]["elrwatch_offline_partitions"]
    body = client.get("/v1/trend").json()
    assert body["toMs"] - body["fromMs"] == 3_600_000
    assert [v for _, v in body["underMinIsr"]] == [under] and [v for _, v in body["offline"]] == [offline]
    gauges = dict(document["gauges"])
    store.write_batch(2, gauges=gauges)  # unchanged: no new point
    gauges["elrwatch_global_under_min_isr_partitions"] = under + 3
    store.write_batch(3, gauges=gauges)
    body = client.get("/v1/trend", params={"minutes": 5}).json()
    assert [v for _, v in body["underMinIsr"]] == [under, under + 3]
    assert [v for _, v in body["offline"]] == [offline]
    times = [t for t, _ in body["underMinIsr"]]
    assert body["fromMs"] <= times[0] <= times[1] <= body["toMs"]
    assert client.get("/v1/trend", params={"minutes": 0}).status_code == 422


#: What `recovered_ledger_row`'s steps make ledger-0's document say.
LEDGER_RECOVERED = "recovered by operator: elected 0, lost 7 records on 3; replica order restored to [3, 0]"


def recovered_ledger_row(lines: list[str]) -> list[Any]:
    """ledger-0's store row after the scenario ``lines`` and three steps of an `elrwatch recover` run (its
    OPERATOR_RECOVERY_RECORDs): what the streaming job writes for it."""
    import orjson

    from elrwatch.state import report
    from elrwatch.state.partition_row import partition_row
    from elrwatch.state.recovery import Loss, Plan

    topic = replay_lines(lines, "scenario.jsonl").cluster.topic_by_name("ledger")
    plan = Plan("ledger", topic.topic_id, 0, 0, "test", 120, 4, (3, 0), (0, 3), (Loss(3, 7, True),))
    steps = [
        plan.record("reorder", "done", "reordered", order=(0, 3)),
        plan.record("verify", "done", "verified", leader=0, end_offset=120),
        plan.record("restore", "done", "restored", order=(3, 0), leader=0),
    ]
    cluster = replay_lines([*lines, *(orjson.dumps(s) for s in steps)], "scenario.jsonl").cluster
    topic = cluster.topic_by_name("ledger")
    partition = cluster.partition(topic.topic_id, 0)
    stored = report.stored_partition(cluster, topic, partition)
    return partition_row("ledger", partition, cluster.effective_min_isr(topic), stored)


def test_history_and_recommendations_show_an_operator_recovery(client: TestClient, store: StatusStore) -> None:
    """An `elrwatch recover` run's steps (OPERATOR_RECOVERY_RECORDs) on ledger-0: the partition's history and its
    recommendation item carry them, with the summary line the page shows."""
    assert store.write_batch(2, partition_rows=[recovered_ledger_row(scenario_lines())])
    history = client.get("/v1/partitions/ledger/0/history").json()
    assert history["operatorRecovery"]["summary"] == LEDGER_RECOVERED
    assert [s["step"] for s in history["operatorRecovery"]["steps"]] == ["reorder", "verify", "restore"]
    assert client.get("/v1/partitions/orders/0/history").json()["operatorRecovery"] is None
    items = client.get("/v1/recommendations", params={"limit": 1000}).json()["items"]
    item = next(i for i in items if (i["topic"], i["partitionId"]) == ("ledger", 0))
    assert item["operatorRecovery"]["summary"] == LEDGER_RECOVERED
    assert item["recommendation"]["recoverCommand"] == "elrwatch recover ledger 0 --execute"
