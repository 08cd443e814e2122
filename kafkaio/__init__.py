"""Kafka clients of elrwatch, neither Spark nor the command line: connection settings and secrets
(:mod:`~elrwatch.kafkaio.config`), kafka-python clients (:mod:`~elrwatch.kafkaio.clients`), connection failures told
in one line (:mod:`~elrwatch.kafkaio.failures`), the Java client's options for Spark's Kafka connector
(:mod:`~elrwatch.kafkaio.jvm`), publishing event lines (:mod:`~elrwatch.kafkaio.produce`) and the event topic's
record headers (:mod:`~elrwatch.kafkaio.headers`). Nothing here imports pyspark: `elrwatch bridge`, `agent` and
`produce` run without it."""
