"""A fair share of the worker (issue 24, item 1), on the real server, queue and
worker, on both stacks: short runs never wait behind long ones, learners take turns,
a long run is cancellable from its page and from the history and cancelling frees
the worker at once, and the form and the queue say how long things take.

Long and short are the run-cost model's (app/runs/cost.py): a ``sleep`` probe is
estimated at its ``seconds``, so ``LONG`` is long and ``SHORT`` short. They run on one
worker (its long slot and its short slot), where turns are easiest to see."""

from __future__ import annotations

import re
import statistics
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from bs4 import BeautifulSoup

from tests.integration.conftest import (
    Stack,
    open_stack,
    setting_default,
    start,
    wait_final,
    wait_for,
)

LONG = {"mode": "sleep", "seconds": 25}  # under the probe's 30 s time limit
SHORT = {"mode": "ok"}
ABOUT = re.compile(r"about (a second|\d+ s|a minute|\d+ min)")


def _status(c: httpx.Client, run_id: str) -> str:
    return str(c.get(f"/api/runs/{run_id}").json()["status"])


def _cancel_all(c: httpx.Client, *ids: str) -> None:
    for run_id in ids:
        c.post(f"/api/runs/{run_id}/cancel")
    for run_id in ids:
        wait_final(c, run_id, timeout=20)


def test_a_short_run_does_not_wait_behind_long_ones(one_worker: Stack) -> None:
    """One learner holds the worker with a long run and has another queued; a second
    learner's short run is done while the long one still runs."""
    hog, other = one_worker.learner(), one_worker.learner()
    first = start(hog, "sandbox-probe-slow", LONG)
    second = start(hog, "sandbox-probe-slow", LONG)
    wait_for(lambda: _status(hog, first) == "running", 30, "the long run never started")
    short = start(other, "sandbox-probe", SHORT)
    try:
        assert wait_final(other, short, timeout=20)["status"] == "succeeded"
        assert _status(hog, first) == "running" and _status(hog, second) == "queued"
    finally:
        _cancel_all(hog, first, second)


def test_learners_take_turns_and_cancelling_frees_the_worker_at_once(one_worker: Stack) -> None:
    """Alice queues two long runs, then Bob one: Bob's goes before Alice's second.
    Cancelling Alice's running one kills its child, and Bob's run starts within a
    second of the cancel."""
    alice, bob = one_worker.learner(), one_worker.learner()
    a1 = start(alice, "sandbox-probe-slow", LONG)
    wait_for(lambda: _status(alice, a1) == "running", 30, "the long run never started")
    a2 = start(alice, "sandbox-probe-slow", LONG)
    b1 = start(bob, "sandbox-probe-slow", LONG)
    try:
        # The queue says who is next and about how long it is.
        panel = BeautifulSoup(bob.get(f"/runs/{b1}").text, "html.parser")
        place = panel.select_one(".queue-position")
        assert place is not None and place["data-position"] == "1", panel.text
        text = " ".join(place.get_text(" ").split())
        assert text.startswith("1st in the CPU queue, about"), text
        assert bob.get(f"/api/runs/{b1}").json()["queue_position"] == 1
        assert alice.get(f"/api/runs/{a2}").json()["queue_position"] == 2
        asked = datetime.now(UTC)
        assert alice.post(f"/api/runs/{a1}/cancel").json()["cancel_requested"] is True
        wait_for(lambda: _status(bob, b1) == "running", 10, "Bob's run never started")
        started = datetime.fromisoformat(bob.get(f"/api/runs/{b1}").json()["started_at"])
        assert (started - asked).total_seconds() < 1.0, started - asked
        ended = wait_final(alice, a1, timeout=5)
        assert ended["status"] == "cancelled"
        assert ended["environment"]["end_reason"] == "cancelled"  # its child was killed
        assert _status(alice, a2) == "queued"
    finally:
        _cancel_all(alice, a1, a2)
        _cancel_all(bob, b1)


def test_runs_are_cancellable_from_the_history(one_worker: Stack) -> None:
    c = one_worker.learner()
    running = start(c, "sandbox-probe-slow", LONG)
    wait_for(lambda: _status(c, running) == "running", 30, "the long run never started")
    queued = start(c, "sandbox-probe-slow", LONG)
    try:
        for page in ("/runs", "/labs/sandbox-probe-slow"):
            soup = BeautifulSoup(c.get(page).text, "html.parser")
            buttons = {str(b["form"]) for b in soup.select("button.cancel-run")}
            assert buttons == {f"cancel-{running}", f"cancel-{queued}"}, page
        soup = BeautifulSoup(c.get("/runs").text, "html.parser")
        form = soup.select_one(f"form#cancel-{queued}")
        assert form is not None
        data = {str(i["name"]): str(i["value"]) for i in form.select("input")}
        r = c.post(str(form["action"]), data=data)
        assert r.status_code == 303 and r.headers["location"] == "/runs"
        assert _status(c, queued) == "cancelled"
        form = BeautifulSoup(c.get("/runs").text, "html.parser").select_one(
            f"form#cancel-{running}"
        )
        assert form is not None
        data = {str(i["name"]): str(i["value"]) for i in form.select("input")}
        assert c.post(str(form["action"]), data=data).status_code == 303
        assert wait_final(c, running, timeout=5)["status"] == "cancelled"
    finally:
        _cancel_all(c, running, queued)


def test_the_lab_form_says_how_long_a_run_takes(one_worker: Stack) -> None:
    c = one_worker.learner()
    soup = BeautifulSoup(c.get("/labs/sandbox-probe-slow").text, "html.parser")
    said = soup.select_one("#lab-estimate")
    assert said is not None and "Takes about a second on this server." in said.get_text(), said
    r = c.get("/labs/sandbox-probe-slow/estimate", params={"mode": "sleep", "seconds": "25"})
    said = BeautifulSoup(r.text, "html.parser").select_one(".estimate-text")
    assert said is not None and said.get_text() == "Takes about 25 s on this server.", r.text
    r = c.get("/labs/sandbox-probe-slow/estimate", params={"mode": "sleep", "seconds": "-1"})
    assert BeautifulSoup(r.text, "html.parser").get_text(strip=True) == ""  # invalid: silent
    soup = BeautifulSoup(c.get("/labs/quant-algorithms").text, "html.parser")
    said = soup.select_one("#lab-estimate")
    assert said is not None and ABOUT.search(said.get_text()), said
    assert float(setting_default("LOWBIT_SHORT_RUN_SECONDS")) < LONG["seconds"]


# Each model lab at its defaults and at a larger size, 3-8x the work (benchmarks/cost_model.py
# has larger ones; these keep the fixture's eight runs under half a minute).
COST_CASES = [
    ("model-quality", {}),
    ("model-quality", {"eval_tokens": 8192, "context": 1024}),
    ("kv-quant", {}),
    ("kv-quant", {"eval_tokens": 8192, "context": 1024}),
    ("tensor-sensitivity", {}),
    ("tensor-sensitivity", {"eval_tokens": 3072}),
    ("quant-algorithms", {}),
    ("quant-algorithms", {"methods": ["gptq", "awq"], "calibration_tokens": 2048}),
]


def _case_id(case: tuple[str, dict[str, Any]]) -> str:
    return f"{case[0]} {case[1]}"


@pytest.fixture(scope="module")
def measured_costs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[float, float]]:
    """(estimate, CPU seconds of the run's child) of each of COST_CASES, run one at a
    time on a stack of its own (SQLite, one worker)."""
    out = {}
    with open_stack("cost", tmp_path_factory.mktemp("cost")) as s:
        c = s.learner()
        for case in COST_CASES:
            run = wait_final(c, start(c, *case), timeout=300)
            assert run["status"] == "succeeded", (case, run["error"])
            out[_case_id(case)] = (float(run["estimate_s"]), run["environment"]["cpu_seconds"])
    return out


@pytest.mark.parametrize("case", COST_CASES, ids=_case_id)
def test_the_cost_estimate_is_within_a_factor_of_two(
    measured_costs: dict[str, tuple[float, float]], case: tuple[str, dict[str, Any]]
) -> None:
    """Against the CPU seconds the run's child used: the estimate is one torch thread's
    time (``cost.estimate_seconds``), and a run's CPU seconds are that work whatever its
    threads (a model lab, ``wide_ops``, runs on every core and its wall time is shorter:
    the estimate is the slow end of the wait).

    Relative to the other cases measured in the same session, as a speed target is: on
    this shared 2-core machine the same child's CPU seconds vary up to 2x over a day
    (in a slow hour every case ran at 0.42-0.60 of the estimates fitted earlier the
    same day: benchmarks/cost_model.py), so an absolute factor of two failed by the
    clock. The absolute ratio only has to stay within 4x either way."""
    estimate, cpu = measured_costs[_case_id(case)]
    typical = statistics.median_high(e / c for e, c in measured_costs.values())
    assert 0.5 <= (estimate / cpu) / typical <= 2.0, (estimate, cpu, typical)
    assert 0.25 <= estimate / cpu <= 4.0, (estimate, cpu)
