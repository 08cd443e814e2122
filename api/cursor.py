"""The opaque pagination cursor of the API's lists and of `elrwatch restart-check`'s output: base64url of the JSON
key, no padding. No FastAPI import, so that the command line prints a cursor without loading the web stack; the API
reads one back with `params.decode_cursor`."""

from __future__ import annotations

import base64
from typing import Any

import orjson


def encode_cursor(key: tuple[Any, ...]) -> str:
    """Opaque cursor: base64url of the JSON key, no padding."""
    return base64.urlsafe_b64encode(orjson.dumps(list(key))).decode().rstrip("=")
