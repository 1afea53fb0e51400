"""Front matter of term cards and lessons, as pydantic models (validated at load).

Quick-check items have one class per type in ``app.content.quiz``."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from app.content.base import Fact, Strict
from app.content.quiz import QuizItem

DEPTHS: tuple[str, ...] = (
    "Orientation",
    "Practical use",
    "Technical understanding",
    "Operations and debugging",
    "Deep dive",
)


class Reference(Strict):
    title: str = Field(min_length=3)
    url: str = Field(pattern=r"^https://\S+$")
    note: str | None = None


class Exercise(Strict):
    symptom: str = Field(min_length=10)
    predict: str = Field(min_length=10)
    lab: str | None = None
    params: dict[str, Any] = {}
    command: str | None = None
    next_step: str = Field(min_length=10)
    evidence: str | None = None
    numeric_prediction: str | None = Field(
        None, description="Key of the lab result's metric the learner predicts numerically"
    )
    unit: str | None = None

    @model_validator(mode="after")
    def _lab_or_command(self) -> Exercise:
        if not self.lab and not self.command:
            raise ValueError("exercise needs a lab or a command")
        return self


class TermFront(Strict):
    title: str = Field(min_length=2)
    aliases: list[str] = []
    domain: str = Field(min_length=2)
    collections: list[str] = Field(min_length=1)
    definition: str = Field(min_length=20, max_length=400)
    references: list[Reference] = Field(min_length=1)
    related: list[str] = []
    related_one_way: dict[str, str] = Field(
        {}, description="related slug -> why the link is deliberately one-way"
    )
    labs: list[str] = []
    exercise: Exercise
    quiz: list[QuizItem] = []
    facts: list[Fact] = []

    @field_validator("definition")
    @classmethod
    def _one_line(cls, v: str) -> str:
        if "\n" in v.strip():
            raise ValueError("definition must be one line")
        return v.strip()


class LabEmbed(Strict):
    lab: str
    params: dict[str, Any] = {}
    prompt: str | None = None


class LessonFront(Strict):
    title: str = Field(min_length=2)
    order: int = Field(ge=1)
    summary: str = Field(min_length=20)
    goal: str = Field(min_length=20)
    prerequisites: list[str] = []
    labs: list[str] = []
    minutes: int = Field(20, ge=1)
    quiz: list[QuizItem] = []
    facts: list[Fact] = []
    where_next: list[str] = []


class Collection(Strict):
    id: str
    title: str
    description: str
    keep_in_view: bool = False
