"""A local Spark session for the tests that run Spark stages in process."""

from __future__ import annotations

from typing import Any


def local_spark(app_name: str, conf: dict[str, str]) -> Any:
    """A Spark session on 2 local cores, without its web UI, with ``conf`` set."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName(app_name).config("spark.ui.enabled", "false")
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
