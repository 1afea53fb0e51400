"""A submission read while its worker records the verdict: the worker commits the
verdict, then ends the run (``judging.record``). Under PostgreSQL's read committed each
statement sees what was committed when it started, so the API must read the run first;
read the other way round, a submission read before the verdict with a run read after
its end showed "error" with no message (seen once under load, in the ten-learners test
of test_judge_escapes.py). Here the worker's two commits land between the API's two
reads, every time."""

from __future__ import annotations

import pytest
from sqlalchemy import event
from sqlalchemy.orm import sessionmaker

from app.db import Learner, Run, Submission, make_engine
from app.migrate import upgrade
from app.runs import judging, submissions


@pytest.mark.parametrize("verdict", ["passed", "failed"])
def test_a_verdict_recorded_between_the_reads_never_shows_as_a_silent_error(
    pg_url: str, verdict: str
) -> None:
    upgrade(pg_url)
    api_engine, worker_engine = make_engine(pg_url), make_engine(pg_url)
    api, worker = sessionmaker(api_engine), sessionmaker(worker_engine)
    with worker() as s:
        s.add(Learner(id="l1"))
        s.flush()
        s.add(
            Run(
                id="r1",
                learner_id="l1",
                lab_id="judge-echo",
                kind="submission",
                status="running",
                worker_id="w1",
            )
        )
        s.flush()
        s.add(
            Submission(
                id="r1",
                learner_id="l1",
                exercise_id="judge-echo",
                mode="submit",
                code="def solve(x):\n    return x + 1\n",
            )
        )
        s.commit()

    recorded: list[bool] = []

    def after_first_read(*_args: object) -> None:
        if not recorded:  # the worker's two commits, between the API's two statements
            tests = [{"name": "t", "passed": verdict == "passed", "message": "m"}]
            v = judging.Verdict(verdict, tests=tests)
            recorded.append(judging.record(worker, "r1", "w1", "l1", "judge-echo", v))

    event.listen(api_engine, "after_cursor_execute", after_first_read)
    try:
        with api() as s:
            got = submissions.get(s, "r1", "l1")
            assert got is not None
            shown = submissions.to_json(*got)
        with api() as s:
            again = submissions.get(s, "r1", "l1")
            assert again is not None
            final = submissions.to_json(*again)
    finally:
        event.remove(api_engine, "after_cursor_execute", after_first_read)
        api_engine.dispose()
        worker_engine.dispose()
    assert recorded == [True]
    # Read mid-record: still running (the run was read first), never a silent "error".
    assert shown["status"] == "running", shown
    assert final["status"] == verdict and final["tests"], final
