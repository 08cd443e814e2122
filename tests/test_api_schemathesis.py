"""Property tests of the API against its own OpenAPI document: no 5xx, responses match the schema."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import checks

from elrwatch.api.app import create_app
from elrwatch.api.settings import Settings
from elrwatch.store import StatusStore

CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]
_TMP = Path(tempfile.mkdtemp(prefix="elrwatch-schemathesis-"))
_STORE = StatusStore(f"sqlite:///{_TMP}/store.db")
_STORE.load_document(json.loads((Path(__file__).parent / "data" / "report_small.json").read_text()), batch_id=1)
app = create_app(Settings(store=str(_STORE.url), ready_max_age_seconds=0), store=_STORE)

schema = schemathesis.openapi.from_asgi("/openapi.json", app)


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_openapi(case: schemathesis.Case) -> None:
    # Not `positive_data_acceptance`: a schema-valid but forged cursor is rightly a 422.
    case.call_and_validate(checks=CHECKS)
