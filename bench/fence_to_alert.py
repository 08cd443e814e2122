"""Benchmark the time from a broker's fence to the alert at an Alertmanager receiver: controller fence record →
`elrwatch bridge --source metadata-log` → event topic → `elrwatch stream` → /metrics → a real Prometheus (the
chart's rules, rendered by helm with ``--for`` as the alert's `for:`) → a real Alertmanager → a webhook receiver in
this process (devtools/alerting.py).

One real Kafka 4.4.0 KRaft cluster (devtools/kafka_cluster.py: controller 0 + brokers 1..3, cluster min ISR 2) with
"payments" (RF 2 on brokers 2 and 3: under min ISR when either goes) and "solo-2" / "solo-3" (RF 1: offline when
its broker goes); the event topic on broker 1, never killed. Prometheus scrapes and evaluates every
``--interval``; Alertmanager notifies at once (group_wait 0s). Each repetition waits a random 0..``--jitter`` s,
kills -9 broker 2 or 3 (in turn), reads the controller's fence record (its CreateTime) from the metadata log, waits
for the alert at the receiver, then restarts the broker and waits for the resolved notification.

**fence → alert = the receiver's wall time − the fence record's CreateTime** (same machine, same clock). It
includes the alert's `for:` (``--for``, default 0s: the pipeline alone; production adds the chart's `for:`, 1m by
default for ElrwatchPartitionsUnderMinIsr and ElrwatchOfflinePartitions). Prints each repetition, then p50 and max.

Run: python bench/fence_to_alert.py [--alert ElrwatchPartitionsUnderMinIsr] [--repetitions 5] [--for 0s]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ helpers

from fence_to_gauge import LogCursor, is_fence

from elrwatch.devtools.alerting import AlertingStack, Pipeline, render_rule_file, wait_until
from elrwatch.devtools.kafka_cluster import KafkaCluster

TOPICS = (("payments", {0: [2, 3], 1: [3, 2]}), ("solo-2", {0: [2]}), ("solo-3", {0: [3]}))
PARTITIONS = 5  # the topics above and the event topic


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--alert",
        default="ElrwatchPartitionsUnderMinIsr",
        help="the chart's alert to wait for (one that a broker kill fires)",
    )
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--for", dest="for_", default="0s", help="the alert's for: (a chart value)")
    parser.add_argument("--interval", default="1s", help="Prometheus' scrape and evaluation interval")
    parser.add_argument("--jitter", type=float, default=2.0, help="random wait before each kill (s)")
    parser.add_argument("--timeout", type=float, default=120.0, help="per alert / resolution (s)")
    parser.add_argument("--keep-workdir", action="store_true")
    args = parser.parse_args()
    if args.repetitions < 1:
        parser.error("--repetitions must be at least 1")

    workdir = Path(tempfile.mkdtemp(prefix="elrwatch-fence-to-alert-"))
    rng = random.Random(20)
    delays: list[float] = []
    try:
        with KafkaCluster(brokers=3, min_insync_replicas=2) as cluster:
            for name, assignment in TOPICS:
                cluster.create_topic(name, replica_assignment=assignment)
            rules = render_rule_file(workdir / "rules.yaml", [f"prometheusRule.alerts.{args.alert}.for={args.for_}"])
            log("starting the bridge and elrwatch stream (Spark) ...")
            with (
                Pipeline(cluster, workdir / "pipeline") as pipeline,
                AlertingStack(
                    rules, [f"127.0.0.1:{pipeline.metrics_port}"], workdir / "stack", interval=args.interval
                ) as stack,
            ):
                if args.alert not in stack.rules_loaded():
                    parser.error(f"--alert {args.alert}: no such alert in the chart's rules")
                wait_until(
                    lambda: (
                        stack.value("elrwatch_partition_count") == PARTITIONS
                        and stack.value("elrwatch_offline_partitions") == 0
                    ),
                    "Prometheus sees the cluster",
                    300,
                )
                cursor = LogCursor(cluster)
                for rep in range(args.repetitions):
                    victim = 2 + rep % 2
                    time.sleep(rng.uniform(0, args.jitter))  # the kill falls anywhere in the poll/batch/scrape cycles
                    cursor.read()  # to the log's current end
                    since = time.time()
                    cluster.kill_broker(victim)
                    killed = time.time()
                    fence = wait_until(
                        lambda v=victim: next((d for d in cursor.read() if is_fence(d, v)), None),
                        f"broker {victim}'s fence record",
                        30,
                        interval=0.05,
                    )
                    fired = wait_until(
                        lambda s=since: stack.receiver.alerts(args.alert, "firing", s),
                        f"{args.alert} at the receiver",
                        args.timeout,
                        interval=0.05,
                    )
                    delay = fired[0]["receivedAt"] - fence.timestamp / 1000
                    delays.append(delay)
                    log(
                        f"#{rep + 1} broker {victim}: kill -> fence {fence.timestamp / 1000 - killed:.2f} s, "
                        f"fence -> {args.alert} at the receiver {delay:.2f} s"
                    )
                    cluster.start_broker(victim)
                    wait_until(
                        lambda s=since: stack.receiver.alerts(args.alert, "resolved", s),
                        f"{args.alert} resolved",
                        args.timeout,
                    )
                    wait_until(
                        lambda: (
                            stack.value("elrwatch_global_under_min_isr_partitions") == 0
                            and stack.value("elrwatch_offline_partitions") == 0
                        ),
                        "ISR restored",
                        args.timeout,
                    )
    finally:
        if args.keep_workdir:
            log(f"work dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"fence -> alert ({args.alert}, for: {args.for_}, scrape/evaluation every {args.interval}, "
        f"{len(delays)} kills): p50 {statistics.median(delays):.2f} s, max {max(delays):.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
