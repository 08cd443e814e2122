"""/v1/whatif: what if these brokers go down now?"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from elrwatch.api.dependencies import HeavyQueriesDep, StoreDep, WhatIfIndexDep
from elrwatch.api.errors import STORE_UNAVAILABLE, ApiError, problem_responses
from elrwatch.api.models import WhatIf
from elrwatch.api.params import INT32_MAX
from elrwatch.api.whatif import run_whatif

router = APIRouter(tags=["partitions"], responses=problem_responses(STORE_UNAVAILABLE))


@router.get(
    "/v1/whatif",
    response_model=WhatIf,
    summary="What if these brokers go down now?",
    responses=problem_responses(
        {
            503: "The status store is unavailable, every heavy-query slot is taken (with `Retry-After`), or the "
            "query reached its time limit"
        }
    ),
)
def whatif(
    store: StoreDep,
    heavy: HeavyQueriesDep,
    index: WhatIfIndexDep,
    down: Annotated[
        str, Query(pattern=r"^\d{1,10}(,\d{1,10}){0,63}$", description="Broker ids, e.g. `1,2`.", examples=["1,2"])
    ],
    unclean: Annotated[
        bool,
        Query(
            description="The brokers restart after an unclean shutdown (losing their ELR seats) "
            "instead of being fenced."
        ),
    ] = False,
    limit: Annotated[int, Query(ge=0, le=10000, description="At most this many partitions per list.")] = 1000,
) -> Any:
    """Which partitions would go under min ISR, leaderless, or need an unclean election if the brokers in
    ``down`` failed now, one after another (``elrwatch.state.whatif`` through the controller model, over the
    partitions with a replica on those brokers). A heavy query: at most ``--heavy-query-slots`` run at once (503
    with ``Retry-After`` past it) and each stops at ``--heavy-query-timeout-seconds`` (503)."""
    brokers_down = list(dict.fromkeys(int(b) for b in down.split(",")))
    if any(b > INT32_MAX for b in brokers_down):
        raise ApiError(422, "Invalid request", "broker ids must be 32-bit integers")
    with heavy.slot("what-if") as deadline:
        if not index.ready.is_set() and index.store.ping():
            index.build_in_background()  # this query reads the store directly; later ones the columns
        return run_whatif(store, brokers_down, unclean=unclean, limit=limit, deadline=deadline, index=index)
