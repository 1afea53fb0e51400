"""Predict, run, compare, reflect: the learner's notebook.

Before a lab runs the learner writes what they expect (and, where the lab
produces a number, a numeric prediction with its unit); after the run the
prediction and the actual value stand side by side, a numeric prediction is
graded within tolerance, and a wrong one becomes a review card.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from app import review
from app.db import NotebookEntry, Run, utcnow
from app.markdown import render_markdown
from app.quiz import AnswerError, convert, parse_number
from app.textfields import too_long
from labs.base import Lab
from labs.registry import get_lab

PREDICTION_TOLERANCE = 0.10  # relative: within 10 % counts as a good prediction
MAX_TEXT = 2000
MAX_QUERY = 200  # a notebook search uses this many characters (and says so when cut)


class PredictionError(ValueError):
    """A message for the learner about their prediction; ``field`` is the form field
    it belongs beside (``_prediction``, ``_metric`` or ``_predicted_value``)."""

    def __init__(self, message: str, field: str = "_predicted_value"):
        super().__init__(message)
        self.field = field


@dataclass
class Prediction:
    text: str
    value: float | None
    unit: str | None
    metric: str | None

    @property
    def empty(self) -> bool:
        return not self.text and self.value is None


def read_prediction(lab: Lab, form: dict[str, str]) -> Prediction:
    """The ``_prediction``, ``_metric`` and ``_predicted_value`` fields of a lab form."""
    text = form.get("_prediction", "").strip()
    if message := too_long("A prediction", text, MAX_TEXT):
        raise PredictionError(message, field="_prediction")
    if "\x00" in text:  # PostgreSQL text cannot hold it: refuse before the run is created
        raise PredictionError(
            "The prediction contains a NUL character; remove it.", field="_prediction"
        )
    raw = form.get("_predicted_value", "").strip()
    units = dict(lab.numeric_outputs)
    metric = form.get("_metric", "") or (lab.numeric_outputs[0][0] if lab.numeric_outputs else "")
    if not raw:
        return Prediction(text, None, None, None)
    if metric not in units:
        raise PredictionError("Choose which result your number predicts.", field="_metric")
    try:
        value, unit = parse_number(raw)
        value, _ = convert(value, unit, units[metric])
    except AnswerError as e:
        raise PredictionError(
            f"Prediction: write a number, optionally with its unit (e.g. 4.5 or 141 GB). {e}"
        ) from None
    return Prediction(text, value, units[metric], metric)


def record(
    session: Session, learner: str, lab: Lab, run: Run, pred: Prediction, source: str
) -> NotebookEntry | None:
    if pred.empty:
        return None
    entry = NotebookEntry(
        learner_id=learner,
        source=source[:140] or f"lab:{lab.id}",
        lab_id=lab.id,
        run_id=run.id,
        prediction=pred.text,
        predicted_value=pred.value,
        predicted_unit=pred.unit,
        metric=pred.metric,
    )
    session.add(entry)
    session.commit()
    return entry


def _number(result: dict[str, Any] | None, key: str | None) -> float | None:
    if not result or not key:
        return None
    node: Any = result
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        return None
    return float(node)


def actuals(run: Run | None) -> list[tuple[str, str]]:
    """What a finished run measured for each number its lab lets a learner predict,
    as ``(label, value with its unit)``: the "Actual" of any prediction, worded or
    numeric, whichever metric it named."""
    if run is None or not run.is_final or not run.result:
        return []
    lab = get_lab(run.lab_id)
    out = []
    for key, unit in lab.numeric_outputs if lab else ():
        value = _number(run.result, key)
        if value is not None:
            out.append((key.replace("_", " "), f"{value:,.6g} {unit}".strip()))
    return out


def settle(session: Session, entry: NotebookEntry, run: Run | None) -> None:
    """Once the run has ended, fill in the actual value and grade the prediction (idempotent)."""
    if (
        run is None
        or not run.is_final
        or entry.actual_value is not None
        or entry.predicted_value is None
    ):
        return
    actual = _number(run.result, entry.metric)
    if actual is None:
        return
    entry.actual_value = actual
    entry.prediction_correct = abs(entry.predicted_value - actual) <= PREDICTION_TOLERANCE * max(
        abs(actual), 1e-12
    )
    entry.updated_at = utcnow()
    if not entry.prediction_correct:
        card = review.get_or_create(session, entry.learner_id, "prediction", entry.id)
        if card.reps == 0:
            review.rate(session, card, 1)
    session.commit()


def for_run(session: Session, run: Run) -> NotebookEntry | None:
    entry = session.scalar(
        select(NotebookEntry)
        .where(NotebookEntry.run_id == run.id, NotebookEntry.learner_id == run.learner_id)
        .order_by(NotebookEntry.created_at.desc())
        .limit(1)
    )
    if entry is not None:
        settle(session, entry, run)
    return entry


def reflection_problem(next_step: str, evidence: str) -> str | None:
    """Why a reflection cannot be saved as typed, or None."""
    if not next_step.strip():
        return "Write one safe next diagnostic step."
    return too_long("The next step", next_step.strip(), MAX_TEXT) or too_long(
        "The evidence", evidence.strip(), MAX_TEXT
    )


def reflect(session: Session, entry: NotebookEntry, next_step: str, evidence: str) -> None:
    """Save a reflection that ``reflection_problem`` passed."""
    entry.next_step = next_step.strip()
    entry.evidence = evidence.strip()
    entry.updated_at = utcnow()
    session.commit()


def search(session: Session, learner: str, q: str = "", limit: int = 200) -> list[NotebookEntry]:
    stmt = select(NotebookEntry).where(NotebookEntry.learner_id == learner)
    q = q.strip()[:MAX_QUERY]
    if q:
        like = "%" + q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        fields = (
            NotebookEntry.prediction,
            NotebookEntry.next_step,
            NotebookEntry.evidence,
            NotebookEntry.lab_id,
            NotebookEntry.source,
        )
        stmt = stmt.where(or_(*(func.lower(f).like(like, escape="\\") for f in fields)))
    return list(session.scalars(stmt.order_by(NotebookEntry.created_at.desc()).limit(limit)))


def verdict(correct: bool | None) -> str:
    """How a graded numeric prediction did ("" before it is graded)."""
    if correct is None:
        return ""
    limit = f"{PREDICTION_TOLERANCE:.0%}".replace("%", " %")
    return f"within {limit}" if correct else f"off by more than {limit}"


def to_markdown(entries: list[NotebookEntry], runs_by_id: dict[str, Run]) -> str:
    """The notebook as a Markdown report (``templates/reports/notebook.md``):
    prediction, parameters, outcome, environment, next step."""
    return render_markdown("notebook.md", entries=entries, runs_by_id=runs_by_id, verdict=verdict)
