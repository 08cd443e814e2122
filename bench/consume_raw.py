"""Raw kafka-python consumption of a whole topic: the ceiling the streaming job's throughput is compared to.

    python bench/consume_raw.py --bootstrap-servers 127.0.0.1:9092 --topic T
"""

from __future__ import annotations

import argparse
import time


def consume_all(bootstrap: str, topic: str, timeout_s: float = 300.0) -> tuple[int, float]:
    """Read every record currently in ``topic`` (all partitions, from the beginning); (records, seconds)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_poll_records=5000,
        fetch_max_bytes=64 * 1024 * 1024,
        max_partition_fetch_bytes=16 * 1024 * 1024,
    )
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        end = consumer.end_offsets(tps)
        want = sum(end.values()) - sum(consumer.beginning_offsets(tps).values())
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got = 0
        started = time.monotonic()
        while got < want and time.monotonic() - started < timeout_s:
            for records in consumer.poll(500).values():
                for record in records:
                    got += 1
                    _ = record.value  # touch the value like a real consumer
        return got, time.monotonic() - started
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    n, seconds = consume_all(args.bootstrap_servers, args.topic)
    print(f"raw kafka-python consumption: {n} records in {seconds:.2f}s = {n / seconds:,.0f} records/s")


if __name__ == "__main__":
    main()
