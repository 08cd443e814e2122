"""One router per resource of the API; ``create_app`` includes them in this order (the OpenAPI document's)."""

from elrwatch.api.routers import (
    brokers,
    operations,
    page,
    partitions,
    recommendations,
    summary,
    topics,
    whatif,
)

ROUTERS = (
    partitions.router,
    topics.router,
    brokers.router,
    summary.router,
    recommendations.router,
    whatif.router,
    operations.router,
    page.router,
)

__all__ = ["ROUTERS"]
