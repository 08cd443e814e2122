"""The status store: the streaming job's sink and the API's source (DESIGN.md §7).

``status_store.py`` the :class:`StatusStore` (writes one micro-batch per transaction, reads documents back),
``schema.py`` its tables, ``rows.py`` how the core's domain rows and documents map to SQL rows, ``sql.py`` the
write helpers (chunked inserts, SQLite's upsert and WAL checkpointer), ``urls.py`` store URLs and their masking.
"""

from elrwatch.store.schema import STORE_SCHEMA, StoreSchemaError
from elrwatch.store.status_store import WAL_SIZE_LIMIT, StatusStore
from elrwatch.store.urls import DEFAULT_URL, mask_url, resolve_url

__all__ = [
    "DEFAULT_URL",
    "STORE_SCHEMA",
    "WAL_SIZE_LIMIT",
    "StatusStore",
    "StoreSchemaError",
    "mask_url",
    "resolve_url",
]
