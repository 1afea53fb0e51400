"""Every quick-check type is one class: its validation, grading and widget."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from app.content.quiz import QUIZ_TYPES, parse_quiz_item
from app.templating import templates

EXAMPLES = {
    "single": {"choices": ["a", "b"], "answer": 0},
    "multiple": {"choices": ["a", "b", "c"], "answer": [0, 2]},
    "ordering": {"choices": ["a", "b"], "answer": [1, 0]},
    "numeric": {"answer": 4.5, "unit": "bits"},
    "free": {"model_answer": "Because the scale is shared.", "rubric": ["names the scale"]},
}


def test_every_type_has_an_example_here() -> None:
    assert set(QUIZ_TYPES) == set(EXAMPLES)


@pytest.mark.parametrize("kind", sorted(QUIZ_TYPES))
def test_type_validates_to_its_class_and_renders_inputs_without_the_answer(kind: str) -> None:
    data = {"id": "q", "type": kind, "prompt": "A question here?", "explanation": "Because."}
    item = parse_quiz_item({**data, "explanation": "The explanation.", **EXAMPLES[kind]})
    assert type(item) is QUIZ_TYPES[kind]
    html = templates.get_template(item.widget).render({"item": item})
    form = BeautifulSoup(html, "html.parser")
    assert form.select("input, select, textarea")
    assert item.explanation not in html
    assert "Because the scale is shared." not in html
    assert item.expected_text()


def test_fields_of_another_type_are_refused() -> None:
    with pytest.raises(ValueError, match="tolerance"):
        parse_quiz_item(
            {
                "id": "q",
                "type": "single",
                "prompt": "A question here?",
                "explanation": "The explanation.",
                "choices": ["a", "b"],
                "answer": 0,
                "tolerance": 0.1,
            }
        )
