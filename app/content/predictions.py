"""A term card's prediction must be one its lab can take and grade.

A card links its lab with ``exercise.params`` and asks the learner to predict
``exercise.numeric_prediction`` (in ``exercise.unit``). That only works when

- the lab's params model accepts the params (else the form opens with errors),
- the key is one of the lab's ``numeric_outputs`` or ``choice_outputs`` (else the
  form has no such number to predict and the prediction is never graded),
- the unit, where the card gives one, is the unit the lab grades the key in,
- the lab's result model holds the key (a dotted path through its fields).

Issue 20 found 19 cards predicting keys no form offered (``bf16.step_ms``,
``kv_cache_bytes_per_gpu``, ``token_capacity``…): each linked a lab whose
prediction could never be graded. Reads lab metadata only; runs no lab.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel

from labs.base import InvalidParams, Lab


def result_model(lab: Lab) -> type[BaseModel] | None:
    """The pydantic model a lab's ``run`` returns, from its annotation (None if unknown);
    where ``run`` returns the result with what only its page shows (``labs.base.Computed``),
    the type of that object's ``result``."""
    try:
        model = typing.get_type_hints(lab.run).get("return")
        if isinstance(model, type) and not issubclass(model, BaseModel):
            model = typing.get_type_hints(model).get("result")
    except Exception:  # noqa: BLE001 - an annotation that cannot resolve is "unknown"
        return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _holds_in(annotation: Any, path: str) -> bool:
    """Whether a value of ``annotation`` can hold ``path``: a model's field, a dict's
    key or a list's index per step; below anything else (``Any``) the rest is trusted."""
    if not path:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return holds(annotation, path)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    head, _, rest = path.partition(".")
    if origin is dict and len(args) == 2:  # noqa: PLR2004 - key and value types
        return _holds_in(args[1], rest)
    if origin is list and args:
        return head.isdigit() and _holds_in(args[0], rest)
    if args and origin not in (dict, list):  # a union: any member will do
        return any(_holds_in(arg, path) for arg in args if arg is not type(None))
    return origin is None and annotation in (Any, object)


def holds(model: type[BaseModel], path: str) -> bool:
    """Whether ``model`` has the dotted ``path`` (fields, dict keys, list indices)."""
    head, _, rest = path.partition(".")
    field = model.model_fields.get(head)
    return field is not None and _holds_in(field.annotation, rest)


def prediction_problems(
    lab: Lab, params: dict[str, Any], key: str | None, unit: str | None
) -> Iterator[str]:
    """What is wrong with a card linking ``lab`` with ``params`` to predict ``key`` in
    ``unit``; nothing when the lab's form takes it and its result grades it."""
    try:
        lab.validate(dict(params))
    except InvalidParams as e:
        shown = "; ".join(f"{k or 'params'}: {v}" for k, v in e.errors.items())
        yield f"exercise params are not what the {lab.id} lab accepts: {shown}"
    if not key:
        return
    numeric = dict(lab.numeric_outputs)
    choices = [c.key for c in lab.choice_outputs]
    if key not in numeric and key not in choices:
        offered = ", ".join([*numeric, *choices]) or "none"
        yield (
            f"numeric_prediction '{key}' is not a result the {lab.id} lab's form lets a "
            f"learner predict (it offers: {offered})"
        )
        return
    if key in numeric and unit and unit != numeric[key]:
        yield (
            f"unit '{unit}' of numeric_prediction '{key}' is not the {lab.id} lab's "
            f"'{numeric[key]}'"
        )
    model = result_model(lab)
    if model is not None and not holds(model, key):
        yield f"the {lab.id} lab's result ({model.__name__}) holds no '{key}'"
