"""The OpenAPI document: FastAPI's, with the problem+json schema for every error an operation can answer (and
bearer security when a token is configured).

Each route declares its own error responses where it is declared (``responses=`` on the route or its router,
built by :func:`elrwatch.api.errors.problem_responses`). Two come from the route's metadata instead: the 422 that
FastAPI documents for every operation with parameters, answered as a problem document by the validation handler,
and the 401 of every path the bearer-token middleware protects.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from elrwatch.api.errors import PROBLEM, PROBLEM_SCHEMA_REF
from elrwatch.api.middleware import is_public
from elrwatch.api.models import Problem


def build_openapi(app: FastAPI, *, auth: bool) -> dict[str, Any]:
    """The app's OpenAPI document with problem+json error responses (and bearer security when ``auth``)."""
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Problem"] = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    problem = {PROBLEM: {"schema": {"$ref": PROBLEM_SCHEMA_REF}}}
    if auth:
        components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, item in schema.get("paths", {}).items():
        for op in item.values():
            responses = op.setdefault("responses", {})
            if "422" in responses:  # FastAPI's validation error, answered by the problem+json handler
                responses["422"] = {"description": "Invalid parameters", "content": problem}
            if auth and not is_public(path):
                op["security"] = [{"bearer": []}]
                responses["401"] = {"description": "Missing or wrong bearer token", "content": problem}
    return schema


def install_openapi(app: FastAPI, *, auth: bool) -> None:
    """Serve :func:`build_openapi` (built once, on first use) as the app's OpenAPI document."""

    def openapi() -> dict[str, Any]:
        if not app.openapi_schema:
            app.openapi_schema = build_openapi(app, auth=auth)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
