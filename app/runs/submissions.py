"""Exercise submissions, the learner's side: validation, creation under the run
quotas, reads and the JSON the API answers.

A submission is a run of kind ``"submission"`` (same id) plus a ``submissions``
row with the code and the verdict: it waits in the same queue, counts against
the same quotas and gets the same 429s, claims, heartbeats and reaper as a lab
run, so ten learners submitting at once cannot starve anyone's lab runs. The
worker judges it (``app.runs.judging``). Imports no torch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import ExerciseState, Run, Submission, utcnow
from app.runs.queue import RunQueue
from app.runs.store import RunRefused, check_quotas, is_short
from app.settings import Settings

log = logging.getLogger("lowbit.runs")

MAX_CODE_BYTES = 64 * 1024
MODES = ("examples", "submit")
SUBMISSION_QUEUE = "cpu"  # every worker takes it; a GPU worker compiles Triton exercises
# A submission's cost estimate (seconds): a fork in a warm sandbox and the grading
# (~0.2 s measured, benchmarks/exercises.py), so it goes in the short lane; the
# exercise's time limit bounds it.
SUBMISSION_ESTIMATE_S = 1.0
HISTORY_LIMIT = 30


def lab_id_for(exercise_id: str) -> str:
    """The ``runs.lab_id`` of a submission: its exercise, marked as such."""
    return f"exercise:{exercise_id}"


def parse_request(body: bytes) -> tuple[str, str]:
    """``(code, mode)`` from a JSON body; ``RunRefused(422)`` saying what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RunRefused(422, "The request is not UTF-8 text.") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except (ValueError, RecursionError) as e:
        raise RunRefused(422, f"The body is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise RunRefused(
            422, 'The body must be a JSON object: {"code": "...", "mode": "examples"}.'
        )
    return check_code(data.get("code")), check_mode(data.get("mode", "examples"))


def check_code(code: Any) -> str:
    if not isinstance(code, str):
        raise RunRefused(422, "code must be a string of Python source.")
    try:
        size = len(code.encode("utf-8"))
    except UnicodeEncodeError:
        raise RunRefused(422, "code is not valid UTF-8 (it holds a lone surrogate).") from None
    if size > MAX_CODE_BYTES:
        raise RunRefused(
            422, f"code is {size:,} bytes; the limit is {MAX_CODE_BYTES:,} bytes (64 KiB)."
        )
    if "\x00" in code:
        raise RunRefused(422, "code holds a NUL character, which Python source cannot.")
    return code


def check_mode(mode: Any) -> str:
    if mode not in MODES:
        raise RunRefused(
            422, f"mode must be 'examples' (run the examples) or 'submit', not {mode!r}."
        )
    return str(mode)


def create(
    session: Session,
    settings: Settings,
    queue: RunQueue,
    learner_id: str,
    exercise_id: str,
    code: str,
    mode: str,
    limit: Callable[[], None] | None = None,
) -> Run:
    """Insert the run and its submission under the learner's quotas, then enqueue.
    ``limit`` may raise ``RateLimited`` (the per-client limit on anonymous runs)."""
    if limit is not None:
        limit()
    now = check_quotas(session, settings, learner_id, gpu=False)
    run = Run(
        learner_id=learner_id,
        lab_id=lab_id_for(exercise_id),
        kind="submission",
        status="queued",
        queue=SUBMISSION_QUEUE,
        params={"exercise": exercise_id, "mode": mode},
        estimate_s=SUBMISSION_ESTIMATE_S,
        created_at=now,
    )
    session.add(run)
    session.flush()
    session.add(
        Submission(
            id=run.id,
            learner_id=learner_id,
            exercise_id=exercise_id,
            mode=mode,
            code=code,
            tests=[],
            output="",
            output_truncated=False,
            created_at=now,
        )
    )
    save_draft(session, learner_id, exercise_id, code)
    session.commit()
    try:
        queue.enqueue(run.id, run.queue, short=is_short(run.estimate_s, settings))
    except Exception:  # safe in the database; the reaper enqueues it later
        log.exception("enqueue failed; the reaper will retry", extra={"run": run.id})
    return run


def state(
    session: Session, learner_id: str, exercise_id: str, create: bool = False
) -> ExerciseState | None:
    st = session.get(ExerciseState, (learner_id, exercise_id))
    if st is None and create:
        st = ExerciseState(
            learner_id=learner_id, exercise_id=exercise_id, hints_shown=0, updated_at=utcnow()
        )
        session.add(st)
    return st


def save_draft(session: Session, learner_id: str, exercise_id: str, code: str) -> None:
    st = state(session, learner_id, exercise_id, create=True)
    assert st is not None
    st.draft, st.updated_at = code, utcnow()


def get(session: Session, submission_id: str, learner_id: str) -> tuple[Run, Submission] | None:
    """The run and submission if they are ``learner_id``'s; None otherwise (404).

    The run is read first: the worker commits the verdict, then ends the run
    (``judging.record``), so a run read as ended has its verdict in the submission read
    after it. Read the other way round, under PostgreSQL's read committed, a submission
    read before the verdict and a run read after its end made "error" with no message."""
    run = session.get(Run, submission_id)
    if run is None:
        return None
    sub = session.get(Submission, submission_id)
    if sub is None or sub.learner_id != learner_id:
        return None
    return run, sub


def history(session: Session, learner_id: str, exercise_id: str) -> list[Submission]:
    q = select(Submission).where(
        Submission.learner_id == learner_id, Submission.exercise_id == exercise_id
    )
    return list(session.scalars(q.order_by(Submission.created_at.desc()).limit(HISTORY_LIMIT)))


def status_of(run: Run, sub: Submission) -> str:
    """queued | running | passed | failed | error | timed_out (DESIGN.md, Exercises),
    or cancelled (by the learner, queued or running)."""
    if not run.is_final:
        return run.status
    if sub.verdict:
        return sub.verdict
    return run.status if run.status in ("timed_out", "cancelled") else "error"


def to_json(run: Run, sub: Submission) -> dict[str, Any]:
    return {
        "id": sub.id,
        "exercise": sub.exercise_id,
        "mode": sub.mode,
        "status": status_of(run, sub),
        "message": sub.message or (run.error if run.is_final else None),
        "tests": [
            {
                "name": t["name"],
                "passed": t["passed"],
                "message": t["message"],
                "detail": t.get("detail", {}),
            }
            for t in sub.tests
        ],
        "output": sub.output,
        "output_truncated": sub.output_truncated,
        "seconds": sub.seconds,
        "sandbox": run.sandbox,
        # After a passing Submit of a quantizer: the shipped model quantized with it.
        "model_proof": (run.result or {}).get("model_proof"),
        "created_at": sub.created_at.isoformat(),
    }
