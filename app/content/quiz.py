"""Quick-check items: one class per item type, each with its own validation, its
grading and the template of its inputs. Grading happens on the server: answers
never reach the page before the learner submits.

A new item type is one subclass of ``QuizItemBase`` with a ``type`` literal, a
``widget`` template (``templates/quiz/_widget_<type>.html``), ``expected_text``
and ``grade``; the union that content is validated against is built from the
subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Union, get_args

from pydantic import Field, TypeAdapter, model_validator

from app.content.base import Fact, Strict
from app.quiz import AnswerError, convert, fmt_number, parse_number
from app.textfields import too_long

MAX_ANSWER_CHARS = 2000
MAX_NUMBER_CHARS = 60  # "1.23e-4 GiB/s" with room to spare


@dataclass
class Grade:
    correct: bool | None  # None: self-graded (free text)
    message: str
    expected: str
    explanation: str
    given: str
    notes: list[str] = field(default_factory=list)


class QuizItemBase(Strict):
    """What every item has; subclasses add their answer and how to grade it."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    type: str
    prompt: str = Field(min_length=8)
    explanation: str = Field(min_length=8)
    depth: int = Field(1, ge=1, le=5)
    fact: Fact | None = None

    # The template (under templates/) that renders this type's inputs.
    widget: ClassVar[str]
    # The longest answer accepted (characters); the widget's maxlength says the same.
    max_answer_chars: ClassVar[int] = MAX_ANSWER_CHARS

    def expected_text(self) -> str:
        """The right answer as the learner reads it after answering."""
        raise NotImplementedError

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        """Grade ``answers`` (the ``answer`` fields, truncated) or other ``form`` fields."""
        raise NotImplementedError

    def _grade(self, ok: bool | None, message: str, given: str, **kw: Any) -> Grade:
        return Grade(ok, message, self.expected_text(), self.explanation, given, **kw)


class _ChoiceItem(QuizItemBase):
    choices: list[str] = []
    answer: Any = None

    def _ints(self, values: list[str]) -> list[int]:
        out = []
        for v in values:
            try:
                i = int(v)
            except ValueError as e:
                raise AnswerError("That choice is not one of the options.") from e
            if not 0 <= i < len(self.choices):
                raise AnswerError("That choice is not one of the options.")
            out.append(i)
        return out

    def _join(self, indexes: list[int], sep: str) -> str:
        return sep.join(self.choices[i] for i in indexes)


class SingleChoice(_ChoiceItem):
    type: Literal["single"]
    widget: ClassVar[str] = "quiz/_widget_single.html"

    @model_validator(mode="after")
    def _shape(self) -> SingleChoice:
        n = len(self.choices)
        if n < 2 or not isinstance(self.answer, int) or not 0 <= self.answer < n:
            raise ValueError("single: needs >= 2 choices and answer = index of the right one")
        return self

    def expected_text(self) -> str:
        return self.choices[self.answer]

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        if len(answers) != 1:
            raise AnswerError("Choose one option.")
        (i,) = self._ints(answers)
        ok = i == self.answer
        return self._grade(ok, "Correct." if ok else "Not quite.", self.choices[i])


class MultipleChoice(_ChoiceItem):
    type: Literal["multiple"]
    widget: ClassVar[str] = "quiz/_widget_multiple.html"

    @model_validator(mode="after")
    def _shape(self) -> MultipleChoice:
        n = len(self.choices)
        ok = (
            isinstance(self.answer, list)
            and self.answer
            and all(isinstance(a, int) and 0 <= a < n for a in self.answer)
        )
        if n < 2 or not ok:
            raise ValueError("multiple: needs >= 2 choices and answer = list of right indexes")
        return self

    def expected_text(self) -> str:
        return self._join(self.answer, "; ")

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        if not answers:
            raise AnswerError("Choose at least one option.")
        picked = sorted(set(self._ints(answers)))
        ok = picked == sorted(self.answer)
        message = "Correct." if ok else "Not quite — check every option."
        return self._grade(ok, message, self._join(picked, "; "))


class Ordering(_ChoiceItem):
    """Put the choices in order; the form has one ``order_<i>`` position per choice."""

    type: Literal["ordering"]
    widget: ClassVar[str] = "quiz/_widget_ordering.html"

    @model_validator(mode="after")
    def _shape(self) -> Ordering:
        if len(self.choices) < 2 or sorted(self.answer or []) != list(range(len(self.choices))):
            raise ValueError("ordering: answer must be a permutation of the choice indexes")
        return self

    def expected_text(self) -> str:
        return self._join(self.answer, " → ")

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        n = len(self.choices)
        try:
            pos = {i: int(form.get(f"order_{i}", [""])[0]) for i in range(n)}
        except ValueError as e:
            raise AnswerError("Give every item a position number.") from e
        if sorted(pos.values()) != list(range(1, n + 1)):
            raise AnswerError(f"Use each position from 1 to {n} exactly once.")
        order = sorted(range(n), key=lambda i: pos[i])
        ok = order == list(self.answer)
        return self._grade(ok, "Correct order." if ok else "Not quite.", self._join(order, " → "))


class Numeric(QuizItemBase):
    """A number in ``unit``; the learner may answer in another unit of the same kind."""

    type: Literal["numeric"]
    answer: Any = None
    tolerance: float = Field(0.0, ge=0)
    tolerance_mode: Literal["abs", "rel"] = "rel"
    unit: str | None = None
    widget: ClassVar[str] = "quiz/_widget_numeric.html"
    max_answer_chars: ClassVar[int] = MAX_NUMBER_CHARS

    @model_validator(mode="after")
    def _shape(self) -> Numeric:
        if isinstance(self.answer, bool) or not isinstance(self.answer, int | float):
            raise ValueError("numeric: answer must be a number")
        if self.unit is None:
            raise ValueError("numeric: give the unit (use '' for a pure number)")
        return self

    def within(self, value: float) -> bool:
        """``value`` (in ``unit``) is within the tolerance of the answer."""
        expected, tol = float(self.answer), self.tolerance
        if self.tolerance_mode == "abs":
            return abs(value - expected) <= tol + 1e-12
        return abs(value - expected) <= max(tol * abs(expected), 1e-9 * max(abs(expected), 1.0))

    def expected_text(self) -> str:
        tol = ""
        if self.tolerance:
            tol = (
                f" (±{self.tolerance:g} {self.unit})"
                if self.tolerance_mode == "abs"
                else f" (±{self.tolerance * 100:g}%)"
            )
        return f"{fmt_number(float(self.answer))} {self.unit or ''}".strip() + tol

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        if len(answers) != 1 or not answers[0].strip():
            raise AnswerError("Type a number.")
        value, unit = parse_number(answers[0])
        value, notes = convert(value, unit, self.unit or "")
        ok = self.within(value)
        message = "Correct." if ok else "Not within tolerance."
        return self._grade(ok, message, answers[0].strip(), notes=notes)


class FreeText(QuizItemBase):
    """One sentence, self-graded against a model answer and a rubric."""

    type: Literal["free"]
    model_answer: str | None = None
    rubric: list[str] = []
    widget: ClassVar[str] = "quiz/_widget_free.html"

    @model_validator(mode="after")
    def _shape(self) -> FreeText:
        if not self.model_answer:
            raise ValueError("free: needs model_answer (and a rubric)")
        return self

    def expected_text(self) -> str:
        return self.model_answer or ""

    def grade(self, answers: list[str], form: dict[str, list[str]]) -> Grade:
        text = answers[0].strip() if answers else ""
        if not text:
            raise AnswerError("Write one sentence first.")
        return self._grade(None, "Compare with the model answer and grade yourself honestly.", text)


def _types(cls: type[QuizItemBase]) -> dict[str, type[QuizItemBase]]:
    """Every concrete subclass (one that names its widget) by its ``type`` key."""
    out: dict[str, type[QuizItemBase]] = {}
    for sub in cls.__subclasses__():
        if "widget" in vars(sub):
            out[get_args(sub.model_fields["type"].annotation)[0]] = sub
        out |= _types(sub)
    return out


QUIZ_TYPES = _types(QuizItemBase)
if TYPE_CHECKING:  # built at run time from the subclasses, which a type checker cannot follow
    QuizItem = QuizItemBase
else:
    # What content is validated against: the union of the types, told apart by ``type``.
    QuizItem = Annotated[Union[tuple(QUIZ_TYPES.values())], Field(discriminator="type")]  # noqa: UP007
_ITEM: TypeAdapter[QuizItemBase] = TypeAdapter(QuizItem)


def parse_quiz_item(data: dict[str, Any]) -> QuizItemBase:
    """Validate one item (a mapping as in front matter) into its type's class."""
    item: QuizItemBase = _ITEM.validate_python(data)
    return item


def grade(item: QuizItemBase, form: dict[str, list[str]]) -> Grade:
    """Grade one submission. ``form`` maps field names to their submitted values."""
    answers = form.get("answer", [])
    for a in answers:
        if message := too_long("An answer", a, item.max_answer_chars):
            raise AnswerError(message)
    return item.grade(answers, form)


def answer_record(form: dict[str, list[str]]) -> dict[str, Any]:
    """The submission as stored with the attempt (bounded: 20 values per field)."""
    return {
        k: [v[:MAX_ANSWER_CHARS] for v in vals][:20]
        for k, vals in form.items()
        if k != "csrf_token"
    }
