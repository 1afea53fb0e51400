"""Lab runs through the real server, queue and worker, on both stacks."""

from __future__ import annotations

import socket
from typing import Any

import httpx
from bs4 import BeautifulSoup
from sqlalchemy import func, select

from app.db import Run
from labs.runtime.limits import lab_cpus, lab_threads
from tests.integration.conftest import Stack, read_sse, start, wait_final, wait_for

FINAL = ("succeeded", "failed", "timed_out", "cancelled")


def test_api_lists_labs_with_their_schema(live: Stack) -> None:
    labs = {lab["id"]: lab for lab in httpx.get(f"{live.url}/api/labs").json()}
    assert {"gpu-status", "torch-env", "block-quantize"} <= set(labs)
    bq = labs["block-quantize"]
    assert bq["needs_gpu"] == "preferred"
    assert set(bq["params_schema"]["properties"]) == {
        "format",
        "shape",
        "distribution",
        "values",
        "seed",
    }


def test_a_run_streams_its_events_and_records_where_it_ran(live: Stack) -> None:
    c = live.learner()
    r = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok"})
    assert r.status_code == 202
    body = r.json()
    assert body["status"] == "queued" and body["url"] == f"/api/runs/{body['id']}"
    events = read_sse(c, f"/api/runs/{body['id']}/events")
    kinds = [e for e, _, _ in events]
    assert kinds[-1] == "end" and events[-1][2]["status"] == "succeeded"
    assert {"log", "table", "metric", "progress", "status"} <= set(kinds)
    seqs = [int(i) for _, i, _ in events if i is not None]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    run = c.get(body["url"]).json()
    assert run["status"] == "succeeded" and run["error"] is None
    assert run["result"]["uid"] != 0  # ran as the sandbox user, not root
    env = run["environment"]
    assert {"host", "worker", "torch", "device", "python"} <= set(env)
    # One intra-op thread; chunked work may use every core the lone run was given.
    assert env["threads"] == lab_threads(1) and env["chunk_threads"] == lab_cpus(1)
    assert env["device"] == "cpu" and env["queue_backend"] == (
        "redis" if live.name == "postgres" else "sqlite"
    )
    assert {
        "network",
        "filesystem",
        "memory",
        "cpu_time",
        "wall_time",
        "output",
        "user",
        "environment",
    } <= set(run["sandbox"])
    assert all(set(p) >= {"enabled", "detail"} for p in run["sandbox"].values())


def test_a_lab_with_wide_ops_gets_every_core_as_torch_threads(live: Stack) -> None:
    """The model labs' forward passes run 1.8x faster on 2 threads than on 1 here: a lab
    marked ``wide_ops`` gets all its run's cores as torch threads, the others half."""
    c = live.learner()
    run_id = start(c, "sandbox-probe-slow", {"mode": "ok"})
    run = wait_final(c, run_id)
    assert run["status"] == "succeeded", run
    env = run["environment"]
    assert env["threads"] == lab_threads(1, wide_ops=True) == lab_cpus(1)
    assert env["chunk_threads"] == lab_cpus(1)


def test_event_stream_resumes_after_last_event_id(live: Stack) -> None:
    c = live.learner()
    run_id = start(c, "sandbox-probe", {"mode": "ok"})
    wait_final(c, run_id)
    full = [(e, i) for e, i, _ in read_sse(c, f"/api/runs/{run_id}/events") if i]
    assert len(full) >= 3
    cut = full[1][1]
    assert cut is not None
    rest = [
        (e, i) for e, i, _ in read_sse(c, f"/api/runs/{run_id}/events", {"Last-Event-ID": cut}) if i
    ]
    assert rest == full[2:]


def test_block_quantize_runs_end_to_end(live: Stack) -> None:
    c = live.learner()
    run_id = start(c, "block-quantize", {"format": "nvfp4", "shape": [256, 256], "seed": 1})
    run = wait_final(c, run_id)
    assert run["status"] == "succeeded", run["error"]
    res = run["result"]
    assert res["shape"] == [256, 256] and res["numel"] == 65536
    assert res["bits_per_value"] == 8 * res["nbytes"] / 65536
    assert len(res["first_blocks"][0]["codes"]) == 16
    plots = [e for e in run["events"] if e["kind"] == "plot"]
    hists = [e for e in plots if e["data"]["data"].get("kind") == "histogram"]
    assert len(hists) == 2 and all(len(e["data"]["data"]["counts"]) == 40 for e in hists)
    page = BeautifulSoup(c.get(f"/runs/{run_id}").text, "html.parser")
    figures = page.select(".run-outputs figure.plot")
    assert len(figures) == len(plots) and all(f.select_one("img[src$='.svg']") for f in figures)
    data_tables = [f.select_one("details table") for f in figures]
    assert all(t is not None for t in data_tables)
    # The two histograms' tables: one row per bin (plus any beyond the range shown).
    hist_tables = [
        t
        for t, f in zip(data_tables, figures, strict=True)
        if f.figcaption.get_text().startswith(("Your tensor's values", "Error of each value"))
    ]
    assert len(hist_tables) == 2 and all(len(t.select("tbody tr")) >= 40 for t in hist_tables)
    assert not page.select("section.run [style]")  # the CSP forbids inline styles
    # The htmx stream: HTML fragments per event, then `end`.
    events = read_sse(c, f"/runs/{run_id}/stream")
    kinds = [e for e, _, _ in events]
    assert kinds[-1] == "end" and "output" in kinds and "log" in kinds
    html = BeautifulSoup("".join(str(d) for e, _, d in events if e == "output"), "html.parser")
    assert html.select("figure.run-table table") and html.select("figure.plot img")


def test_bad_params_answer_422_per_field_and_enqueue_nothing(live: Stack) -> None:
    c = live.learner()
    with live.factory() as s:
        before = s.scalar(select(func.count()).select_from(Run))
    pending = live.queue.pending_count("cpu")
    cases: list[tuple[Any, str]] = [
        ({"shape": [10**6, 10**6]}, "shape"),
        ({"shape": [-4, 16]}, "shape"),
        ({"format": "fp3"}, "format"),
        ({"distribution": "custom", "values": [1.0, "NaN"]}, "values"),
        ({"seed": "seven"}, "seed"),
        ({"shape": "256x256"}, "shape"),
        ({"bogus": 1}, "bogus"),
    ]
    for params, fld in cases:
        r = c.post("/api/labs/block-quantize/runs", json=params)
        assert r.status_code == 422, (params, r.text)
        fields = {d["field"]: d["message"] for d in r.json()["detail"]}
        assert fld in fields and fields[fld], (params, fields)
    # NaN as a JSON literal (Python's json accepts it) is caught the same way.
    r = c.post(
        "/api/labs/block-quantize/runs",
        content=b'{"distribution": "custom", "values": [NaN, 1.0]}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "values"
    assert (
        c.post(
            "/api/labs/block-quantize/runs",
            content=b"[1, 2]",
            headers={"Content-Type": "application/json"},
        ).status_code
        == 422
    )
    assert c.post("/api/labs/no-such-lab/runs", json={}).status_code == 404
    with live.factory() as s:
        assert s.scalar(select(func.count()).select_from(Run)) == before
    assert live.queue.pending_count("cpu") == pending


def test_another_learner_gets_404_everywhere(live: Stack) -> None:
    alice, mallory = live.learner(), live.learner()
    run_id = start(alice, "sandbox-probe", {"mode": "ok"})
    wait_final(alice, run_id)
    for path in (
        f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/events",
        f"/runs/{run_id}",
        f"/runs/{run_id}/stream",
    ):
        assert mallory.get(path).status_code == 404, path
        assert alice.get(path).status_code == 200, path
    assert mallory.post(f"/api/runs/{run_id}/cancel").status_code == 404
    assert mallory.get(f"/runs/compare?a={run_id}&b={run_id}").status_code == 404


def test_two_active_runs_at_most_then_429_and_cancel(live: Stack) -> None:
    c = live.learner()
    first = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 20})
    second = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 20})
    r = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok"})
    assert r.status_code == 429 and "limit is 2" in r.json()["detail"]
    wait_for(
        lambda: c.get(f"/api/runs/{first}").json()["status"] == "running",
        30,
        "first run never started",
    )
    # One worker runs one lab at a time: with one worker the second waits, with two
    # both run.
    if live.n_workers == 1:
        assert c.get(f"/api/runs/{second}").json()["status"] == "queued"
    else:
        wait_for(
            lambda: c.get(f"/api/runs/{second}").json()["status"] == "running",
            30,
            "the second worker never took the second run",
        )
    # The run page, loaded mid-run: what happened so far, then the stream from there on,
    # the one live channel: no poll (issue 20.2), the status panel swapped by the stream.
    wait_for(lambda: c.get(f"/api/runs/{first}").json()["events"], 10, "no events yet")
    page = BeautifulSoup(c.get(f"/runs/{first}").text, "html.parser")
    stream = page.select_one("[sse-connect]")
    assert stream is not None and stream["sse-connect"].startswith(f"/runs/{first}/stream?after=")
    assert int(str(stream["sse-connect"]).split("after=")[1].split("&")[0]) >= 1
    assert not page.select("[hx-trigger*=every]"), "the run page must not poll"
    panel = page.select_one(f"#run-{first}-status")
    assert panel is not None and panel["sse-swap"] == "status"
    # The stream carries the status panel: badge, progress bar and Cancel.
    events = read_sse(c, f"/runs/{first}/stream", until=lambda kind, _: kind == "status")
    status = BeautifulSoup(events[-1][2], "html.parser")
    assert status.select_one(".status.running") is not None
    assert status.select_one("progress") is not None
    assert status.select_one(f"form[hx-target='#run-{first}']") is not None
    if live.n_workers == 1:
        assert c.post(f"/api/runs/{second}/cancel").json()["status"] == "cancelled"
    else:
        assert c.post(f"/api/runs/{second}/cancel").json()["cancel_requested"] is True
    assert c.post(f"/api/runs/{first}/cancel").json()["cancel_requested"] is True
    for run_id in (first, second):
        assert wait_final(c, run_id, timeout=10)["status"] == "cancelled"
    assert start(c, "sandbox-probe", {"mode": "ok"})  # slots are free again


def test_the_sandbox_holds_under_the_real_worker(live: Stack) -> None:
    c = live.learner()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        net = start(
            c,
            "sandbox-probe",
            {"mode": "network", "target": f"127.0.0.1:{listener.getsockname()[1]}"},
        )
        secret = start(
            c, "sandbox-probe", {"mode": "read_secret", "target": live.env["LOWBIT_SECRET_KEY"]}
        )
        for run_id in (net, secret):
            run = wait_final(c, run_id)
            assert run["status"] == "succeeded" and run["result"]["blocked"], run["result"]
        db_file = str(
            live.settings.data_dir / ("lowbit.db" if live.name == "sqlite" else "queue.db")
        )
        if live.name == "postgres":
            db_file = str(live.settings.data_dir)
        run = wait_final(c, start(c, "sandbox-probe", {"mode": "read_db", "target": db_file}))
        assert run["result"]["blocked"], run["result"]
        assert run["sandbox"]["network"]["enabled"] and run["sandbox"]["hidden_paths"]["enabled"]
    finally:
        listener.close()


def test_time_and_memory_limits_end_runs_with_reasons(live: Stack) -> None:
    c = live.learner()
    spin = start(c, "sandbox-probe", {"mode": "spin"})
    hog = start(c, "sandbox-probe", {"mode": "memory"})
    run = wait_final(c, spin)
    assert run["status"] == "timed_out" and "time limit of 2 s" in run["error"]
    run = wait_final(c, hog)
    assert (
        run["status"] == "failed" and "out of memory" in run["error"] and "256 MiB" in run["error"]
    )


def test_pages_form_post_without_js_and_with_htmx(live: Stack) -> None:
    c = live.learner()
    page = BeautifulSoup(c.get("/labs").text, "html.parser")
    assert page.select_one('a[href="/labs/block-quantize"]') is not None
    lab = BeautifulSoup(c.get("/labs/block-quantize").text, "html.parser")
    form = lab.select_one("form#lab-form")
    assert form is not None and form["action"] == "/labs/block-quantize/runs"
    assert lab.select_one('select[name="format"] option[selected]')["value"] == "nvfp4"
    assert {i["name"] for i in form.select("input, select")} >= {
        "csrf_token",
        "format",
        "shape",
        "distribution",
        "values",
        "seed",
    }
    token = c.cookies["lowbit_csrf"]
    # Without JavaScript: POST, 303, then the run page.
    r = c.post(
        "/labs/sandbox-probe/runs",
        data={"csrf_token": token, "mode": "ok"},
        headers={"X-CSRF-Token": ""},
    )
    assert r.status_code == 303
    run_url = r.headers["location"]
    run_id = run_url.rsplit("/", 1)[1]
    wait_final(c, run_id)
    done = BeautifulSoup(c.get(run_url).text, "html.parser")
    assert done.select_one("section.run .status").get_text(strip=True) == "succeeded"
    assert done.select_one(".run-outputs table") is not None  # the probe's table event
    # Bad input re-renders the form with the message next to the field.
    r = c.post(
        "/labs/block-quantize/runs",
        data={"csrf_token": token, "shape": "0, 5"},
        headers={"X-CSRF-Token": ""},
    )
    assert r.status_code == 422
    bad = BeautifulSoup(r.text, "html.parser")
    assert "between 1 and 4096" in bad.select_one("#p-shape-e").get_text()
    # With htmx: the live run fragment, following the stream.
    r = c.post(
        "/labs/sandbox-probe/runs",
        data={"csrf_token": token, "mode": "ok"},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200 and r.headers["HX-Push-Url"].startswith("/runs/")
    frag = BeautifulSoup(r.text, "html.parser")
    assert (
        frag.select_one("section.run[data-status]") is not None and frag.select_one("html") is None
    )
    wait_final(c, r.headers["HX-Push-Url"].rsplit("/", 1)[1])
    # History and compare.
    hist = BeautifulSoup(c.get("/runs?lab=sandbox-probe").text, "html.parser")
    ids = [i["value"] for i in hist.select('input[name="run"]')]
    assert len(ids) >= 2
    cmp = c.get(f"/runs/compare?run={ids[0]}&run={ids[1]}")
    assert cmp.status_code == 200
    assert BeautifulSoup(cmp.text, "html.parser").select("table.compare tbody tr")
