"""Raw consumption of a whole topic, by kafka-python and by Kafka's own JVM consumer (its ConsumerPerformance
tool, from the jars of `make kafka-jars`): the ceilings the streaming job's throughput is compared to.

    python bench/consume_raw.py --bootstrap-servers 127.0.0.1:9092 --topic T
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from elrwatch.kafkaio.config import READER_FETCH_SIZES

KAFKA_LIBS = Path(os.environ.get("ELRWATCH_KAFKA_LIBS", Path(__file__).resolve().parent.parent / ".tools/kafka/libs"))


def consume_all(bootstrap: str, topic: str, timeout_s: float = 300.0) -> tuple[int, float]:
    """Read every record currently in ``topic`` (all partitions, from the beginning); (records, seconds)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **READER_FETCH_SIZES)
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


def consume_all_jvm(bootstrap: str, topic: str, records: int, heap: str = "512m") -> dict[str, float]:
    """Kafka's ConsumerPerformance reading ``records`` records of ``topic`` from the beginning (a JVM with the
    default JIT, as Spark's executors run it); its figures: ``records_s`` over the whole run, ``fetch_records_s``
    without the consumer group's join (Spark's source assigns partitions and has no join), ``seconds``."""
    done = subprocess.run(
        [
            "java",
            f"-Xmx{heap}",
            "-cp",
            str(KAFKA_LIBS / "*"),
            "org.apache.kafka.tools.ConsumerPerformance",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--timeout",
            "120000",
            "--command-property",
            "auto.offset.reset=earliest",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"ConsumerPerformance failed ({done.returncode}): {done.stderr[-2000:]}")
    header = [h.strip() for h in lines[0].split(",")]
    values = dict(zip(header, (v.strip() for v in lines[-1].split(",")), strict=False))
    fetch_ms = float(values["fetch.time.ms"])
    return {
        "records": float(values["data.consumed.in.nMsg"]),
        "records_s": float(values["nMsg.sec"]),
        "fetch_records_s": float(values["fetch.nMsg.sec"]),
        "seconds": fetch_ms / 1000,
    }


class JvmProducer:
    """Kafka's own ConsoleProducer fed ``key<TAB>value`` lines on stdin, with `elrwatch produce`'s keys (and with
    ``headers``, its routing headers: kafkaio/headers.py): publishes a burst of events about as fast as a controller
    writes them (≈ 10x kafka-python's producer, which on these 2 cores also takes a core from the job under test). The JVM starts when the object is made (make it ahead of a timed
    burst) and waits on its stdin; `send` (once) returns when Kafka acknowledged every line (the producer flushes
    and exits when its stdin closes)."""

    def __init__(self, bootstrap: str, topic: str, heap: str = "512m", headers: bool = False) -> None:
        self.headers = headers
        cmd = [
            "java",
            f"-Xmx{heap}",
            "-cp",
            str(KAFKA_LIBS / "*"),
            "org.apache.kafka.tools.ConsoleProducer",
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--request-required-acks",
            "1",
            "--reader-property",
            "parse.key=true",
            "--reader-property",
            "key.separator=\t",
            *(("--reader-property", "parse.headers=true") if headers else ()),
            "--command-property",
            "linger.ms=20",
            "--command-property",
            "batch.size=262144",
            "--command-property",
            "max.in.flight.requests.per.connection=1",
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def send(self, lines: Iterable[bytes], timeout_s: float = 600.0) -> tuple[int, float, float]:
        """(lines sent, monotonic time the first line was written, monotonic time all were acknowledged)."""
        from elrwatch.kafkaio.produce import EventKeys

        keys = EventKeys()
        if self.headers:  # ``name:value,...<TAB>key<TAB>value`` (a name ends at its first ':'): the routing headers
            rows = []
            for line in lines:
                key, headers = keys.with_headers(line)
                named = b",".join(name.encode() + b":" + value for name, value in headers)
                rows.append(named + b"\t" + key + b"\t" + line.rstrip(b"\n") + b"\n")
            payload = b"".join(rows)
        else:
            payload = b"".join(keys(line) + b"\t" + line.rstrip(b"\n") + b"\n" for line in lines)
        proc = self.proc
        assert proc.stdin is not None and proc.stderr is not None
        first = time.monotonic()
        try:
            proc.stdin.write(payload)
            proc.stdin.close()
            err = proc.stderr.read()
            code = proc.wait(timeout_s)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        if code != 0:
            raise RuntimeError(f"ConsoleProducer failed ({code}): {err.decode(errors='replace')[-2000:]}")
        return payload.count(b"\n"), first, time.monotonic()

    def close(self) -> None:
        """End the JVM if `send` never ran."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    args = parser.parse_args()
    n, seconds = consume_all(args.bootstrap_servers, args.topic)
    print(f"raw kafka-python consumption: {n} records in {seconds:.2f}s = {n / seconds:,.0f} records/s")
    jvm = consume_all_jvm(args.bootstrap_servers, args.topic, n)
    print(
        f"raw JVM consumption (ConsumerPerformance): {jvm['fetch_records_s']:,.0f} records/s without the group "
        f"join, {jvm['records_s']:,.0f} with it"
    )


if __name__ == "__main__":
    main()
