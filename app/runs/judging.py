"""The worker's side of exercise submissions: grade learner code with the kit,
running only the learner's functions in the judge sandbox.

Grading (the reference computation and the comparison) is trusted code and runs
here, in the worker; the sandbox (``labs.judge.sandbox``) gets the code and the
encoded arguments and nothing else: no environment, no database connection, no
file of the project, so it can neither read a credential nor forge a pass. Each
worker thread keeps its own warm sandbox.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from app.db import ExerciseState, Submission, utcnow
from app.exercises import load_exercises
from app.runs import claims
from app.settings import Settings
from labs.judge.gpu import GpuAccess
from labs.judge.policy import Limits
from labs.judge.sandbox import Execution, Judge, JudgeUnavailable

log = logging.getLogger("lowbit.worker")

MIN_WALL_S = 2.0
# Exercises whose passing quantizer then quantizes the shipped model (labs.judge.model_proof):
# exercise id -> the format its bytes are in.
MODEL_PROOFS = {"q8_0-quantize": "q8_0"}
# The proof runs the learner's function once per decoder linear: longer than a test run.
PROOF_LIMITS = Limits(wall_s=60.0, cpu_s=60)


CANCELLED = "Cancelled: your code was stopped."


class Cancelled(Exception):
    """The submission was cancelled while its code ran."""


@dataclass
class Verdict:
    verdict: str  # passed | failed | error | timed_out | cancelled
    message: str | None = None
    tests: list[dict[str, Any]] = field(default_factory=list)
    output: str = ""
    output_truncated: bool = False
    seconds: float = 0.0
    sandbox: dict[str, Any] = field(default_factory=dict)
    model_proof: dict[str, Any] | None = None


class Grading:
    """Judges submissions for one worker: the exercises (loaded once) and one warm
    sandbox per worker thread."""

    def __init__(self, settings: Settings, gpu: GpuAccess | None = None):
        self.settings = settings
        # On a GPU worker, Triton exercises run compiled in a sandbox given this GPU
        # (labs.judge.gpu); everything else runs without one.
        self.gpu = gpu
        self._local = threading.local()
        self._judges: list[Judge] = []
        self._lock = threading.Lock()
        self._exercises: dict[str, Any] | None = None

    def exercises(self) -> dict[str, Any]:
        with self._lock:
            if self._exercises is None:
                self._exercises = dict(load_exercises(self.settings))
            return self._exercises

    def use_gpu(self, cuda: bool) -> None:
        """Called once the worker knows its device: find the GPU Triton exercises get."""
        from labs.judge import cgroups, gpu

        self.gpu = gpu.detect(cuda_available=lambda: cuda) if cuda else None
        if self.gpu is not None:
            # CUDA runs without an address-space limit: only a cgroup bounds its memory.
            probe = cgroups.create(2**30, 64)
            can = probe.enabled
            probe.remove()
            if not can:
                log.warning("no cgroup for a GPU sandbox: Triton stays interpreted")
                self.gpu = None
        log.info("judge GPU", extra={"gpu": self.gpu.nodes if self.gpu else None})

    def judge(self, on_gpu: bool = False) -> Judge:
        """This thread's warm sandbox: with the GPU (``on_gpu`` on a GPU worker) or not."""
        key = "gpu" if on_gpu and self.gpu is not None else "cpu"
        j: Judge | None = getattr(self._local, key, None)
        if j is None:
            j = Judge(gpu=self.gpu if key == "gpu" else None)
            setattr(self._local, key, j)
            with self._lock:
                self._judges.append(j)
        return j

    def close(self) -> None:
        with self._lock:
            for j in self._judges:
                j.close()
            self._judges.clear()

    def grade(
        self,
        exercise_id: str,
        mode: str,
        code: str,
        should_stop: Callable[[], bool] | None = None,
    ) -> Verdict:
        """Judge ``code``; ``should_stop`` (a cancel or a worker shutdown) ends the
        running child at once and the verdict is ``cancelled``."""
        from labs.judge import kit

        ex = self.exercises().get(exercise_id)
        if ex is None:
            return Verdict("error", f"There is no exercise {exercise_id!r} on this worker.")
        wall = max(MIN_WALL_S, float(ex.time_limit_s))
        limits = Limits(wall_s=wall, cpu_s=int(wall) + 1)
        runs: list[Execution] = []

        stop = should_stop or (lambda: False)

        judge = self.judge(on_gpu=ex.language == "triton")

        def execute(calls: list[Any]) -> list[Any]:
            e = judge.run(code, [(c.function, tuple(c.args)) for c in calls], limits, stop)
            runs.append(e)
            if e.status == "cancelled" or stop():
                raise Cancelled
            if e.results is None:
                why = e.message or "your code produced no results"
                return [kit.CallResult(None, why, 0.0) for _ in calls]
            return call_results(e)

        try:
            results = kit.grade(ex, mode, execute)
        except JudgeUnavailable as e:
            return Verdict("error", f"Your code was not run: {e}.")
        except Cancelled:
            return Verdict("cancelled", CANCELLED, sandbox=runs[-1].protections if runs else {})
        verdict = summarise(results, runs)
        if verdict.verdict == "passed" and mode == "submit" and ex.id in MODEL_PROOFS:
            verdict.model_proof = self.prove(ex, code, MODEL_PROOFS[ex.id])
        return verdict

    def prove(self, ex: Any, code: str, fmt: str) -> dict[str, Any]:
        """The learner's quantizer on every decoder linear of the shipped model, beside
        lowbit's (KL divergence and top-1 agreement); ``{"error": ...}`` if it fails."""
        from labs.judge.model_proof import ProofError, model_proof

        def execute(calls: list[Any]) -> list[Any]:
            e = self.judge().run(code, [(c.function, tuple(c.args)) for c in calls], PROOF_LIMITS)
            if e.results is None:
                raise ProofError(e.message or "your code produced no results")
            return call_results(e)

        try:
            return model_proof(ex.function, fmt, execute).as_dict()
        except (ProofError, JudgeUnavailable) as e:
            return {"error": str(e)}


def call_results(e: Execution) -> list[Any]:
    """The sandbox's per-call results as the kit's ``CallResult``s."""
    from labs.judge.kit import CallResult

    return [CallResult(r["value"], r["error"], float(r["seconds"])) for r in e.results or []]


def summarise(results: list[Any], runs: list[Execution]) -> Verdict:
    tests = [
        {"name": r.name, "passed": bool(r.passed), "message": r.message, "detail": r.detail or {}}
        for r in results
    ]
    v = Verdict("failed", tests=tests)
    v.output = "".join(e.output for e in runs)
    v.output_truncated = any(e.output_truncated for e in runs)
    v.seconds = round(sum(e.seconds for e in runs), 4)
    v.sandbox = runs[-1].protections if runs else {}
    if any(e.status == "timed_out" for e in runs):
        v.verdict = "timed_out"
        v.message = next(e.message for e in runs if e.status == "timed_out")
    elif tests and all(t["passed"] for t in tests):
        v.verdict = "passed"
    elif runs and all(e.results is None for e in runs):
        v.verdict, v.message = "error", runs[-1].message
    elif (error := _load_error(runs)) is not None:
        v.verdict, v.message = "error", "No test could run: " + error
    return v


LOAD_ERRORS = ("SyntaxError", "IndentationError", "TabError", "ImportError", "ModuleNotFoundError")


def _load_error(runs: list[Execution]) -> str | None:
    """The one error every call hit when the code itself did not load (a syntax error,
    a failed import at the top), as Exercism's ``error`` status means; None otherwise."""
    errors = {r["error"] for e in runs for r in (e.results or [])}
    if len(errors) != 1:
        return None
    text = errors.pop()
    last = text.splitlines()[-1] if text else ""
    return str(text) if last.startswith(LOAD_ERRORS) else None


def load(factory: sessionmaker[Session], run_id: str) -> Submission:
    with factory() as s:
        sub = s.get(Submission, run_id)
        if sub is None:
            raise LookupError(f"run {run_id} has no submission row")
        s.expunge(sub)
        return sub


def record(
    factory: sessionmaker[Session],
    run_id: str,
    worker_id: str,
    learner_id: str,
    exercise_id: str,
    v: Verdict,
) -> bool:
    """Store the verdict on the submission, then end its run (the status the API
    shows comes from both); False if the run was taken from this worker meanwhile."""
    with factory() as s:
        s.execute(
            update(Submission)
            .where(Submission.id == run_id)
            .values(
                verdict=v.verdict,
                message=v.message,
                tests=v.tests,
                output=v.output,
                output_truncated=v.output_truncated,
                seconds=v.seconds,
            )
        )
        if v.verdict == "passed":
            _mark_passed(s, learner_id, exercise_id)
        s.commit()
    status = {"timed_out": "timed_out", "error": "failed", "cancelled": "cancelled"}.get(
        v.verdict, "succeeded"
    )
    ending = claims.Ending(
        status,
        result={
            "verdict": v.verdict,
            "passed": sum(t["passed"] for t in v.tests),
            "tests": len(v.tests),
        },
        error=v.message if status != "succeeded" else None,
        sandbox=v.sandbox,
        duration_s=v.seconds,
    )
    return claims.finish(factory, run_id, worker_id, ending)


def _mark_passed(s: Session, learner_id: str, exercise_id: str) -> None:
    st = s.get(ExerciseState, (learner_id, exercise_id))
    now = utcnow()
    if st is None:
        s.add(
            ExerciseState(
                learner_id=learner_id,
                exercise_id=exercise_id,
                hints_shown=0,
                passed_at=now,
                updated_at=now,
            )
        )
    elif st.passed_at is None:
        st.passed_at = now
