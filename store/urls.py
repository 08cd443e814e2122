"""Store URLs: parsed with the password from a file, and masked for logs. SQLAlchemy is imported on first use."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

DEFAULT_URL = "sqlite:///var/elrwatch.db"


def mask_url(url: str | URL) -> str:
    """The URL as text with its password (if any) replaced by ``***`` — the only form that may be logged."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a parseable URL: reveal nothing of it
        return "<unparseable store URL>"


def resolve_url(url: str, password: str | None = None, password_file: str | Path | None = None) -> URL:
    """Parse a store URL; set its password from ``password`` or the first line of ``password_file``."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if password_file is not None:
        lines = Path(password_file).read_text(encoding="utf-8").splitlines()
        password = lines[0] if lines else ""
    if password is not None:
        parsed = parsed.set(password=password)
    return parsed
