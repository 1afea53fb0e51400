"""Input that one database accepts and the other refuses (regressions from the fuzz
runs): NUL characters, which PostgreSQL cannot store in text or JSON, and integers
past a 64- or 32-bit column. On both stacks each answers 4xx with a message, never 500.
"""

from __future__ import annotations

from tests.integration.conftest import Stack, start, wait_final

BIG = str(2**63)


def test_nul_characters_and_huge_numbers_are_refused_not_crashed_on(live: Stack) -> None:
    c = live.learner()
    token = c.headers["X-CSRF-Token"]
    run_id = start(c, "sandbox-probe", {"mode": "ok"})
    wait_final(c, run_id)
    gets = [
        "/api/runs/a%00b",
        "/runs/a%00b",
        "/goto?q=a%00b",
        "/search?q=a%00b",
        "/notebook?q=a%00b",
        "/runs?lab=a%00",
        "/labs/block-quantize?rerun=a%00",
        "/runs/compare?a=x%00&b=y",
        f"/runs/{run_id}/plots/{BIG}.svg",
        f"/api/runs/{run_id}/events?after={BIG}",
        f"/runs/{run_id}/stream?after={BIG}",
    ]
    for path in gets:
        r = c.get(path)
        assert 400 <= r.status_code < 500 or r.status_code == 200, (path, r.status_code)
    posts = [
        ("/api/runs/a%00b/cancel", {}),
        ("/notebook/a%00/reflect", {"next_step": "x"}),
        (f"/review/{BIG}/answer", {"answer": "1"}),
        (f"/review/{BIG}/rate", {"rating": "3"}),
        ("/signin", {"username": "a\x00b", "password": "x" * 12}),
        ("/labs/sandbox-probe/runs", {"mode": "ok", "_prediction": "a\x00b"}),
        ("/labs/sandbox-probe/runs", {"mode": "ok", "target": "a\x00b"}),
    ]
    for path, data in posts:
        r = c.post(path, data={**data, "csrf_token": token}, headers={"X-CSRF-Token": ""})
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
    r = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok", "target": "a\u0000b"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "target"
    # An event stream resumed from a bogus Last-Event-ID starts from the beginning.
    r = c.get(f"/api/runs/{run_id}/events", headers={b"Last-Event-ID": b"\xb2"})
    assert r.status_code == 200 and "event: end" in r.text
    # Nothing above was stored: the learner has the one run they started.
    assert c.get(f"/api/runs/{run_id}").status_code == 200
