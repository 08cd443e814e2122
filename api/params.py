"""Path and query parameters shared by the routers, and the reading of the opaque pagination cursor (its writing:
``cursor.py``)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any

import orjson
from fastapi import Path, Query

from elrwatch.api.errors import ApiError

TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"  # Kafka's legal topic names
CURSOR_PATTERN = r"^[A-Za-z0-9_-]{1,400}$"  # base64url, no padding
INT32_MAX = 2**31 - 1

TopicParam = Annotated[str, Path(pattern=TOPIC_PATTERN, description="Topic name.", examples=["orders"])]
PartitionParam = Annotated[int, Path(ge=0, le=INT32_MAX, description="Partition id.", examples=[0])]
CursorParam = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="`nextCursor` of the previous page.")]


def decode_cursor(cursor: str, types: tuple[type, ...]) -> tuple[Any, ...]:
    """Inverse of `cursor.encode_cursor`; 422 on anything that is not a cursor this API issued."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = orjson.loads(raw)
    except (binascii.Error, ValueError, orjson.JSONDecodeError) as exc:
        raise ApiError(422, "Invalid cursor", "cursor is not one this API issued") from exc
    if (
        not isinstance(values, list)
        or len(values) != len(types)
        or not all(type(v) is t for v, t in zip(values, types, strict=True))
        or any(isinstance(v, int) and not 0 <= v <= INT32_MAX for v in values)
        or any(isinstance(v, str) and not re.match(TOPIC_PATTERN, v) for v in values)
    ):
        raise ApiError(422, "Invalid cursor", "cursor is not one this API issued")
    return tuple(values)
