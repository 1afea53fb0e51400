"""Server-side grading of every item type, tolerance edges and unit handling."""

from __future__ import annotations

import pytest

from app.content.quiz import QuizItemBase, grade, parse_quiz_item
from app.quiz import AnswerError, parse_number


def item(**kw) -> QuizItemBase:  # type: ignore[no-untyped-def]
    base = {"id": "x", "prompt": "A question here?", "explanation": "Because of the explanation."}
    return parse_quiz_item({**base, **kw})


SINGLE = item(type="single", choices=["a", "b", "c"], answer=1)
MULTI = item(type="multiple", choices=["a", "b", "c"], answer=[0, 2])
ORDER = item(type="ordering", choices=["x", "y", "z"], answer=[2, 0, 1])
GB = item(type="numeric", answer=141.1, tolerance=0.01, unit="GB")
ABS = item(type="numeric", answer=4.5, tolerance=0.05, tolerance_mode="abs", unit="bits")
EXACT = item(type="numeric", answer=327680, unit="bytes")
FREE = item(type="free", model_answer="Because the scale is shared.", rubric=["names the scale"])


def test_single() -> None:
    assert grade(SINGLE, {"answer": ["1"]}).correct
    assert not grade(SINGLE, {"answer": ["0"]}).correct
    for bad in (["7"], ["x"], [], ["0", "1"]):
        with pytest.raises(AnswerError):
            grade(SINGLE, {"answer": bad})


def test_multiple_needs_exact_set() -> None:
    assert grade(MULTI, {"answer": ["2", "0"]}).correct
    assert not grade(MULTI, {"answer": ["0"]}).correct
    assert not grade(MULTI, {"answer": ["0", "1", "2"]}).correct
    assert grade(MULTI, {"answer": ["0", "2", "2"]}).correct  # duplicates from a double click
    with pytest.raises(AnswerError):
        grade(MULTI, {})


def test_ordering() -> None:
    # positions: z first, x second, y third
    assert grade(ORDER, {"order_0": ["2"], "order_1": ["3"], "order_2": ["1"]}).correct
    assert not grade(ORDER, {"order_0": ["1"], "order_1": ["2"], "order_2": ["3"]}).correct
    with pytest.raises(AnswerError):
        grade(ORDER, {"order_0": ["1"], "order_1": ["1"], "order_2": ["3"]})


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("141.1", True),
        ("141.1 GB", True),
        ("1.411e11 bytes", True),
        ("1.411e2", True),
        ("142.5", True),
        ("139.7", True),
        ("142.6", False),
        ("139.6", False),
        ("131.4 GiB", True),
        ("141.1 GiB", False),
        ("141,100,000,000 B", True),
        ("141100 MB", True),
    ],
)
def test_numeric_tolerance_and_units(text: str, ok: bool) -> None:
    assert grade(GB, {"answer": [text]}).correct is ok


def test_gib_answer_to_gb_question_explains_the_difference() -> None:
    g = grade(GB, {"answer": ["141.1 GiB"]})
    assert not g.correct
    assert any("GiB" in n and "10⁹" in n for n in g.notes)


def test_absolute_tolerance_edges() -> None:
    assert grade(ABS, {"answer": ["4.55"]}).correct
    assert grade(ABS, {"answer": ["4.45"]}).correct
    assert not grade(ABS, {"answer": ["4.56"]}).correct


def test_exact_numeric() -> None:
    assert grade(EXACT, {"answer": ["327680"]}).correct
    assert grade(EXACT, {"answer": ["320 KiB"]}).correct
    assert not grade(EXACT, {"answer": ["320 KB"]}).correct
    assert not grade(EXACT, {"answer": ["327681"]}).correct


@pytest.mark.parametrize(
    "text", ["abc", "1.2.3", "nan", "inf", "1e999", "5 parsecs", "", "9" * 100, "141 bits"]
)
def test_numeric_bad_input_is_a_clear_error(text: str) -> None:
    with pytest.raises(AnswerError) as e:
        grade(GB, {"answer": [text]})
    assert str(e.value)


def test_parse_number_forms() -> None:
    assert parse_number("1.4e11") == (1.4e11, None)
    assert parse_number(" 141 GB ") == (141.0, "gb")
    assert parse_number("1,234.5") == (1234.5, None)
    assert parse_number("-0.5") == (-0.5, None)


def test_free_text_is_self_graded() -> None:
    g = grade(FREE, {"answer": ["<script>alert(1)</script> scales"]})
    assert g.correct is None and g.expected == "Because the scale is shared."
    with pytest.raises(AnswerError):
        grade(FREE, {"answer": ["   "]})


def test_overlong_free_text_is_refused_with_its_limit_never_cut() -> None:
    assert len(grade(FREE, {"answer": ["x" * 2000]}).given) == 2000
    with pytest.raises(AnswerError, match="at most 2,000 characters; this one has 10,000"):
        grade(FREE, {"answer": ["x" * 10_000]})
