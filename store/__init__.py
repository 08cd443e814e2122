"""The status store: the streaming job's sink and the API's source (DESIGN.md §7).

``status_store.py`` the :class:`StatusStore` (writes one micro-batch per transaction, reads documents back),
``schema.py`` its tables, ``rows.py`` how the core's domain rows and documents map to SQL rows, ``sql.py`` the
write helpers (chunked inserts, SQLite's upsert and WAL checkpointer), ``urls.py`` store URLs and their masking.

The names below load their module on first use, so that importing ``elrwatch.store.urls`` (the default URL)
does not import SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers only: at run time __getattr__ loads each name's module on first use
    from elrwatch.store.schema import STORE_SCHEMA, StoreSchemaError
    from elrwatch.store.status_store import WAL_SIZE_LIMIT, StatusStore
    from elrwatch.store.urls import DEFAULT_URL, mask_url, resolve_url

_EXPORTS = {
    "DEFAULT_URL": "elrwatch.store.urls",
    "STORE_SCHEMA": "elrwatch.store.schema",
    "WAL_SIZE_LIMIT": "elrwatch.store.status_store",
    "StatusStore": "elrwatch.store.status_store",
    "StoreSchemaError": "elrwatch.store.schema",
    "mask_url": "elrwatch.store.urls",
    "resolve_url": "elrwatch.store.urls",
}

__all__ = [
    "DEFAULT_URL",
    "STORE_SCHEMA",
    "WAL_SIZE_LIMIT",
    "StatusStore",
    "StoreSchemaError",
    "mask_url",
    "resolve_url",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
