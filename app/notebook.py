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
from labs.base import INTERVAL_SUFFIX, ChoiceOutput, Lab
from labs.registry import get_lab
from labs.viz.tiles import human_label

PREDICTION_TOLERANCE = 0.10  # relative: within 10 % counts as a good prediction
MAX_TEXT = 2000
MAX_QUERY = 200  # a notebook search uses this many characters (and says so when cut)
PERCENT = 100


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
    choice: str | None = None

    @property
    def empty(self) -> bool:
        return not self.text and self.value is None and self.choice is None


def output_label(key: str, unit: str = "") -> str:
    """A predictable output as words: ('kl_divergence', 'nats') → 'KL divergence (nats)';
    a unit the words already say is not repeated ('perplexity', not 'perplexity
    (perplexity)')."""
    words = human_label(key).replace("Kl ", "KL ").replace("Top1", "Top-1")
    words = words[:1].upper() + words[1:]  # a label, as its neighbours: "Stored bytes"
    shown = "%" if unit == "fraction" else unit
    return f"{words} ({shown})" if shown and shown.lower() not in words.lower() else words


def shown_value(value: float | None, unit: str | None) -> str:
    """A predicted or measured number as the form asked for it: a share in %."""
    if value is None:
        return "—"
    if unit == "fraction":
        return f"{value * PERCENT:,.4g} %"
    return f"{value:,.6g}"


def _choice_output(lab: Lab, key: str | None) -> ChoiceOutput | None:
    return next((c for c in lab.choice_outputs if c.key == key), None)


def _read_choice(lab: Lab, form: dict[str, str], text: str) -> Prediction | None:
    """A prediction by choice (``_choice`` = "key:option"), or None when none was made."""
    raw = form.get("_choice", "").strip()
    if not raw:
        return None
    key, _, option = raw.partition(":")
    out = _choice_output(lab, key)
    if out is None or option not in out.options:
        raise PredictionError("Choose one of the options offered.", field="_choice")
    return Prediction(text, None, None, key, option)


def read_prediction(lab: Lab, form: dict[str, str]) -> Prediction:
    """The ``_prediction``, ``_metric`` and ``_predicted_value`` fields of a lab form."""
    text = form.get("_prediction", "").strip()
    if message := too_long("A prediction", text, MAX_TEXT):
        raise PredictionError(message, field="_prediction")
    if "\x00" in text:  # PostgreSQL text cannot hold it: refuse before the run is created
        raise PredictionError(
            "The prediction contains a NUL character; remove it.", field="_prediction"
        )
    choice = _read_choice(lab, form, text)
    if choice is not None:
        return choice
    raw = form.get("_predicted_value", "").strip()
    units = dict(lab.numeric_outputs)
    metric = form.get("_metric", "") or (lab.numeric_outputs[0][0] if lab.numeric_outputs else "")
    if not raw:
        return Prediction(text, None, None, None)
    if metric not in units:
        raise PredictionError("Choose which result your number predicts.", field="_metric")
    try:
        value, unit = parse_number(raw)
        if units[metric] == "fraction" and (unit == "%" or (unit is None and value > 1)):
            value, unit = value / PERCENT, None  # the form asks for a share in %
        value, _ = convert(value, unit, units[metric])
    except AnswerError as e:
        raise PredictionError(
            f"Prediction: write a number, optionally with its unit (e.g. 4.5 or 141 GB). {e}"
        ) from None
    return Prediction(text, value, units[metric], metric)


# Characters of the page a lab was started from (term:<slug>, lesson:<slug>), as stored.
SOURCE_LIMIT = 140


def record(
    session: Session, learner: str, lab: Lab, run: Run, pred: Prediction, source: str
) -> NotebookEntry | None:
    if pred.empty:
        return None
    entry = NotebookEntry(
        learner_id=learner,
        source=source or f"lab:{lab.id}",  # at most SOURCE_LIMIT: the route refuses more
        lab_id=lab.id,
        run_id=run.id,
        prediction=pred.text,
        predicted_value=pred.value,
        predicted_unit=pred.unit,
        predicted_choice=pred.choice,
        metric=pred.metric,
    )
    session.add(entry)
    session.commit()
    return entry


def _node(result: dict[str, Any] | None, key: str | None) -> Any:
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
    return node


def _number(result: dict[str, Any] | None, key: str | None) -> float | None:
    node = _node(result, key)
    if isinstance(node, bool) or not isinstance(node, int | float) or not math.isfinite(node):
        return None
    return float(node)


def interval(result: dict[str, Any] | None, key: str | None) -> tuple[float, float] | None:
    """The 95 % interval a run stored beside output ``key``, or None."""
    node = _node(result, f"{key}{INTERVAL_SUFFIX}" if key else None)
    if (
        isinstance(node, list)
        and len(node) == 2
        and all(isinstance(v, int | float) and math.isfinite(v) for v in node)
    ):
        return float(node[0]), float(node[1])
    return None


def actuals(run: Run | None) -> list[tuple[str, str]]:
    """What a finished run measured for each number its lab lets a learner predict,
    as ``(label, value with its unit)``: the "Actual" of any prediction, worded or
    numeric, whichever metric it named."""
    if run is None or not run.is_final or not run.result:
        return []
    lab = get_lab(run.lab_id)
    if lab is None:
        return []
    from labs.presenters.intervals import pm

    out = []
    for c in lab.choice_outputs:
        won = _node(run.result, c.key)
        if isinstance(won, str):
            ties = [t for t in _node(run.result, c.ties_key) or [] if t != won]
            out.append(
                (c.label, won + (f" (tied within the noise: {', '.join(ties)})" if ties else ""))
            )
    for key, unit in lab.numeric_outputs:
        value = _number(run.result, key)
        if value is not None:
            scale, shown = (100.0, "%") if unit == "fraction" else (1.0, unit)
            shown = "" if shown.lower() == key else shown  # not "perplexity perplexity"
            iv = interval(run.result, key)
            text = pm(value, iv, shown, scale) if iv else f"{value * scale:,.6g} {shown}".strip()
            out.append((output_label(key, unit), text))
    return out


def settle(session: Session, entry: NotebookEntry, run: Run | None) -> None:
    """Once the run has ended, fill in the actual value and grade the prediction (idempotent)."""
    if run is None or not run.is_final or entry.prediction_correct is not None:
        return
    if entry.predicted_choice is not None:
        if not _settle_choice(entry, run):
            return
    elif entry.predicted_value is None or not _settle_number(entry, run):
        return
    entry.updated_at = utcnow()
    if not entry.prediction_correct:
        card = review.get_or_create(session, entry.learner_id, "prediction", entry.id)
        if card.reps == 0:
            review.rate(session, card, 1)
    session.commit()


def _settle_number(entry: NotebookEntry, run: Run) -> bool:
    """Grade a numeric prediction: right within PREDICTION_TOLERANCE of the value, or
    anywhere inside the 95 % interval the run measured (the run cannot tell it apart)."""
    actual = _number(run.result, entry.metric)
    if actual is None or entry.predicted_value is None:
        return False
    entry.actual_value = actual
    guess = entry.predicted_value
    iv = interval(run.result, entry.metric)
    close = abs(guess - actual) <= PREDICTION_TOLERANCE * max(abs(actual), 1e-12)
    entry.prediction_correct = close or (iv is not None and iv[0] <= guess <= iv[1])
    return True


def _settle_choice(entry: NotebookEntry, run: Run) -> bool:
    """Grade a choice: right when it is the winner or tied with it within the noise."""
    lab = get_lab(run.lab_id)
    out = _choice_output(lab, entry.metric) if lab else None
    won = _node(run.result, entry.metric) if out else None
    if out is None or not isinstance(won, str):
        return False
    ties = _node(run.result, out.ties_key) or []
    entry.actual_choice = won
    entry.prediction_correct = entry.predicted_choice == won or entry.predicted_choice in ties
    return True


def _close(entry: NotebookEntry) -> bool:
    return (
        entry.actual_value is not None
        and entry.predicted_value is not None
        and abs(entry.predicted_value - entry.actual_value)
        <= PREDICTION_TOLERANCE * max(abs(entry.actual_value), 1e-12)
    )


def grade_phrase(entry: NotebookEntry, run: Run | None) -> str:
    """How a graded prediction did, as a phrase for reports ("" before grading):
    'within 10 %', 'inside the run's 95 % interval', 'tied with gptq within the noise'."""
    if entry.prediction_correct is None:
        return ""
    limit = f"{PREDICTION_TOLERANCE:.0%}".replace("%", " %")
    choice = getattr(entry, "predicted_choice", None)
    if choice is not None:
        won = entry.actual_choice
        if choice == won:
            return f"right: {won} won"
        if entry.prediction_correct:
            return f"right within the noise: tied with the winner, {won}"
        return f"{won} won, clear of {choice}"
    if entry.prediction_correct:
        return f"within {limit}" if _close(entry) else "inside the run's 95 % interval"
    outside = interval(run.result if run else None, entry.metric) is not None
    return f"off by more than {limit}" + (" and outside the 95 % interval" if outside else "")


def grade_words(entry: NotebookEntry, run: Run | None) -> str:
    """Why a graded prediction is right or wrong, as the run page's sentence."""
    phrase = grade_phrase(entry, run)
    if not phrase:
        return ""
    if getattr(entry, "predicted_choice", None) is not None:
        if entry.predicted_choice == entry.actual_choice:
            return f"Right: {entry.actual_choice} won."
        if entry.prediction_correct:
            return (
                f"Right as far as this run can tell: {entry.predicted_choice} is inside the "
                f"noise of the winner, {entry.actual_choice}."
            )
        return f"Not this time: {phrase}."
    if entry.prediction_correct and _close(entry):
        return f"{phrase[:1].upper()}{phrase[1:]} — good prediction."
    if entry.prediction_correct:
        return "Inside the run's 95 % interval — as right as this run can tell."
    return f"{phrase[:1].upper()}{phrase[1:]}."


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


def to_markdown(entries: list[NotebookEntry], runs_by_id: dict[str, Run]) -> str:
    """The notebook as a Markdown report (``templates/reports/notebook.md``):
    prediction, parameters, outcome, environment, next step."""
    return render_markdown(
        "notebook.md",
        entries=entries,
        runs_by_id=runs_by_id,
        verdict=lambda e: grade_phrase(e, runs_by_id.get(e.run_id or "")),
    )
