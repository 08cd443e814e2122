"""The status page: its shell (``/``, public: it holds no data and asks for the token) and its static files."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse, Response

STATIC = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def index() -> FileResponse:
    """The status page."""
    return FileResponse(STATIC / "index.html", media_type="text/html")


@router.get("/favicon.ico")
def favicon() -> Response:
    """No icon (204), so that browsers stop asking."""
    return Response(status_code=204)
