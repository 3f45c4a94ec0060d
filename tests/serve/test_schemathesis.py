"""schemathesis against `kime serve`'s own OpenAPI document: every operation, with bodies
generated from the declared schemas (valid and invalid), against a real server on loopback.
No response may be a server error."""
from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency")
pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")

from hypothesis import HealthCheck, settings  # noqa: E402

from .loopback import TINY, LoopbackServer  # noqa: E402


@pytest.fixture(scope="module")
def api_schema():
    import warnings

    import kime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    server = LoopbackServer(engine)
    yield schemathesis.openapi.from_url("http://127.0.0.1:%d/openapi.json" % server.port)
    server.stop()


@pytest.mark.slow  # schemathesis: every operation, 60 bodies each
def test_no_operation_answers_a_server_error(api_schema):
    # schemathesis's own pytest plugin does not run under this pytest; its Python API does.
    from hypothesis import given

    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/systemone", "/v1/systemone/batch"}
    seen = {}
    for operation in operations:
        @given(operation.as_strategy())
        # derandomized: the same 60 bodies each run, so whether they reach a 200 (asserted
        # below) does not depend on the seed; a random seed once found none for a route
        @settings(max_examples=60, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
        def call(case):
            response = case.call()
            seen.setdefault(operation.path, set()).add(response.status_code)
            case.validate_response(response, checks=[schemathesis.checks.not_a_server_error])

        call()
    # The generated bodies reached the model, and were refused, on both decision routes.
    for path in ("/v1/systemone", "/v1/systemone/batch"):
        assert 200 in seen[path] and any(400 <= s < 500 for s in seen[path]), (path, seen[path])
