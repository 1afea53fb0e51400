"""Schemathesis against the app's own OpenAPI schema, in process: every operation
gets generated valid and invalid requests (with the CSRF token, so they reach the
routes), once with generated path parameters and once with real ones (a learner's
own run, review card and notebook entry, real term, lesson and lab ids), and none
may answer 5xx.

``LOWBIT_FUZZ_EXAMPLES`` sets the examples per operation and mode: the default
keeps this near a minute for `make test`; `make bench` (benchmarks/fuzz.py) runs
more.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from app.middleware import CSRF_COOKIE, SESSION_COOKIE
from tests.inprocess import InProcess, app_routes, path_params, seed_learner

EXAMPLES = int(os.environ.get("LOWBIT_FUZZ_EXAMPLES", "25"))
# Operations whose inputs admit few distinct cases (no parameters) send fewer.
MIN_PER_OPERATION = 5


def negatable(operation: dict[str, Any], path_fixed: bool) -> bool:
    """Whether negative mode can make any part of a request to ``operation`` invalid:
    a query, header or cookie parameter, a body, or (when the path values are
    generated) a path parameter that is not a string; any string is a valid string.
    Where nothing can be, hypothesis rejects ~460 drafts (1-3 s) and sends nothing:
    those passes took two thirds of this test and checked no request."""
    if operation.get("requestBody"):
        return True
    return any(
        p["in"] != "path" or (not path_fixed and p.get("schema", {}).get("type") != "string")
        for p in operation.get("parameters", [])
    )


def test_no_operation_answers_5xx(inproc: InProcess) -> None:
    me = seed_learner(inproc)
    cookies = {
        CSRF_COOKIE: me.client.cookies[CSRF_COOKIE],
        SESSION_COOKIE: me.client.cookies[SESSION_COOKIE],
    }
    headers = {"X-CSRF-Token": cookies[CSRF_COOKIE]}
    real = me.path_values(inproc.app)
    schema = schemathesis.openapi.from_asgi("/api/openapi.json", inproc.app)
    spec = inproc.app.openapi()
    operations = [r.ok() for r in schema.get_all_operations()]  # type: ignore[union-attr]
    documented = {(op.method.upper(), op.path) for op in operations}
    routes = {
        (m, path)
        for path, r in app_routes(inproc.app)
        if r.include_in_schema
        for m in r.methods
        if m != "HEAD"
    }
    assert routes == documented  # every route is fuzzed
    sent: Counter[int] = Counter()
    failures: list[str] = []
    for op in operations:
        fixed = path_params(op.path, real)
        passes: list[tuple[GenerationMode, dict[str, str] | None]] = [
            (GenerationMode.POSITIVE, None),
            (GenerationMode.NEGATIVE, None),
        ]
        if fixed:
            passes += [(GenerationMode.POSITIVE, fixed), (GenerationMode.NEGATIVE, fixed)]
        raw = spec["paths"][op.path][op.method.lower()]
        passes = [
            (mode, path)
            for mode, path in passes
            if mode is GenerationMode.POSITIVE or negatable(raw, path_fixed=bool(path))
        ]
        for mode, path in passes:

            @given(case=op.as_strategy(generation_mode=mode, path_parameters=path))
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def one(case: Any) -> None:
                r = case.call(headers=headers, cookies=cookies)
                sent[r.status_code] += 1
                assert r.status_code < 500, (
                    f"{case.method} {case.formatted_path} -> {r.status_code}\n{r.text[:1000]}\n"
                    f"{case.as_curl_command()}"
                )

            try:
                one()
            except AssertionError as e:
                failures.append(str(e))
            except Unsatisfiable:
                failures.append(f"{op.method} {op.path}: nothing generated in {mode.name} mode")
    total = sum(sent.values())
    print(f"\nschemathesis: {total} requests over {len(operations)} operations: {dict(sent)}")
    assert not failures, "\n\n".join(failures)
    assert total >= len(operations) * MIN_PER_OPERATION
    assert sent[200] and sent[404] and sent[422]  # it reached routes, not just their 404s
