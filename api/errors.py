"""The API's errors: every one is an ``application/problem+json`` document (RFC 9457)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("elrwatch.api")

PROBLEM = "application/problem+json"
PROBLEM_SCHEMA_REF = "#/components/schemas/Problem"
STORE_UNAVAILABLE = {503: "Status store unavailable"}


def problem_responses(codes: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """FastAPI ``responses=`` for the problem documents a route or router answers: status code → description."""
    return {
        code: {"description": description, "content": {PROBLEM: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}}}
        for code, description in codes.items()
    }


class ApiError(Exception):
    """An error answered as a problem document."""

    def __init__(
        self, status: int, title: str, detail: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail or title)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers


def problem(
    status: int,
    title: str,
    detail: str | None = None,
    instance: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response:
    """An ``application/problem+json`` response (``headers``: e.g. a 503's ``Retry-After``)."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    body.update(extra)
    headers = {**(headers or {}), **({"WWW-Authenticate": 'Bearer realm="elrwatch"'} if status == 401 else {})}
    return Response(orjson.dumps(body), status_code=status, media_type=PROBLEM, headers=headers or None)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return problem(exc.status, exc.title, exc.detail, request.url.path, headers=exc.headers)


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors)
    return problem(422, "Invalid request", detail, request.url.path, errors=errors)


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    titles = {404: "Not Found", 405: "Method Not Allowed"}
    return problem(exc.status_code, titles.get(exc.status_code, "HTTP error"), str(exc.detail), request.url.path)


async def _store_error(request: Request, exc: Exception) -> Response:
    log.error("status store error on %s: %s", request.url.path, type(exc).__name__)
    return problem(503, "Store unavailable", "the status store could not be read", request.url.path)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unexpected error on %s", request.url.path)
    return problem(500, "Internal Server Error", "unexpected error; see the API log", request.url.path)


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error as a problem document: bad parameters 422, unknown routes 404/405, an unreachable
    store 503, anything unexpected 500 (logged)."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(SQLAlchemyError, _store_error)
    app.add_exception_handler(Exception, _unexpected)
