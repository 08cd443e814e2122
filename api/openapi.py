"""The OpenAPI document: FastAPI's, with a problem+json response for every error an operation can answer (and
bearer security when a token is configured)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from elrwatch.api.errors import PROBLEM
from elrwatch.api.models import Problem


def _error_responses(path: str, *, auth: bool) -> dict[str, str]:
    """Status code → description of the problem responses an operation on ``path`` documents."""
    codes = {"422": "Invalid parameters", "503": "Status store unavailable"}
    if "{topic}" in path:
        codes["404"] = "Unknown topic or partition"
    if path == "/v1/whatif":
        codes["503"] = "What-if not available, or store unavailable"
    if path == "/readyz":
        codes["503"] = "Store unreachable, data too old or too far behind the job"
    if auth and path != "/healthz":
        codes["401"] = "Missing or wrong bearer token"
    return codes


def _without_parameters(path: str) -> bool:
    """Operations that take no parameters (and so answer no 422)."""
    return path in ("/healthz", "/metrics") or path.endswith(("/topics", "/brokers", "/summary"))


def build_openapi(app: FastAPI, *, auth: bool) -> dict[str, Any]:
    """The app's OpenAPI document with problem+json error responses (and bearer security when ``auth``)."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    ref = {"$ref": "#/components/schemas/Problem"}
    if auth:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, item in schema.get("paths", {}).items():
        for op in item.values():
            responses = op.setdefault("responses", {})
            if auth and path != "/healthz":
                op["security"] = [{"bearer": []}]
            for code, description in _error_responses(path, auth=auth).items():
                responses[code] = {"description": description, "content": {PROBLEM: {"schema": ref}}}
            if _without_parameters(path):
                responses.pop("422", None)
            if path == "/healthz":
                responses.pop("503", None)  # no store access
    return schema


def install_openapi(app: FastAPI, *, auth: bool) -> None:
    """Serve :func:`build_openapi` (built once, on first use) as the app's OpenAPI document."""

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            app.openapi_schema = build_openapi(app, auth=auth)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
