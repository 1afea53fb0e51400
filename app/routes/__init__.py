"""One router per area; app.main only assembles them.

Every router is made by ``router()``: its sync routes close the request's database
session in their own thread, as soon as they return. Closed later by the
dependency's clean-up on the event loop, a finished route's connection would stay
checked out while the loop works through a burst, and the threads taking the next
requests would find the pool empty (the 30 s wedge of issue 13).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session

from app import cpu


def _closing_sessions(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(endpoint)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return endpoint(*args, **kwargs)
        finally:
            for value in kwargs.values():
                if isinstance(value, Session):
                    value.close()

    return run


class SessionClosingRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint):
            # Its Python runs in a turn (app.cpu), its queries outside one.
            endpoint = cpu.in_turn(_closing_sessions(endpoint))
        super().__init__(path, endpoint, **kwargs)


def router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` whose sync routes release their database connection on return."""
    return APIRouter(route_class=SessionClosingRoute, **kwargs)
