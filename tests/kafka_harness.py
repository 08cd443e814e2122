"""Test harness for a real Kafka-wire server (noida-db); the implementation lives in elrwatch.streaming."""

from __future__ import annotations

from elrwatch.streaming.local_kafka import KafkaServer, free_port, noida_executable

__all__ = ["KafkaServer", "free_port", "noida_executable"]
