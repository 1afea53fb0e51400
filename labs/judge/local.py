"""Running a learner's functions in this process, through the wire, as the sandbox does.

For trusted code only: the content check runs the reference solutions with it, and the
unit tests run known-wrong solutions. Learner code runs in the judge's sandbox, never
here. The arguments and the results go through ``wire.encode``/``wire.decode`` exactly
as they cross the sandbox boundary, so a value the wire cannot carry fails here too.
"""

from __future__ import annotations

import contextlib
import io
import linecache
import os
import time
import traceback
from collections.abc import Sequence
from typing import Any, NamedTuple

from labs.judge import wire

SOLUTION_FILE = "<solution>/solution.py"  # the name learners see in their tracebacks
RESULT_LIMIT = 64 << 20  # bytes of encoded results


class Call(NamedTuple):
    """One call of a learner's function: its name and positional arguments."""

    function: str
    args: tuple[Any, ...]


class CallResult(NamedTuple):
    """What one call gave: its value (or None), the error text (or None), seconds taken."""

    value: Any
    error: str | None
    seconds: float


def _error_text(e: BaseException) -> str:
    """The exception with only the learner's own frames."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == SOLUTION_FILE]
    lines = traceback.format_list(frames) + traceback.format_exception_only(type(e), e)
    return "".join(lines).rstrip()


def _call_all(code: str, calls: list[Any]) -> list[dict[str, Any]]:
    namespace: dict[str, Any] = {"__name__": "solution", "__file__": SOLUTION_FILE}
    # Tracebacks (and Triton, which reads a kernel's source) find the lines here.
    linecache.cache[SOLUTION_FILE] = (len(code), None, code.splitlines(True), SOLUTION_FILE)
    try:
        exec(compile(code, SOLUTION_FILE, "exec"), namespace)  # noqa: S102 - trusted code only
    except Exception as e:  # noqa: BLE001 - reported as the learner would see it
        return [{"value": None, "error": _error_text(e), "seconds": 0.0} for _ in calls]
    results = []
    for function, args in calls:
        fn = namespace.get(function)
        start = time.perf_counter()
        try:
            if not callable(fn):
                raise NameError(f"your code defines no function named {function!r}")
            value, error = fn(*args), None
        except Exception as e:  # noqa: BLE001
            value, error = None, _error_text(e)
        results.append({"value": value, "error": error, "seconds": time.perf_counter() - start})
    return results


def _interpret_triton() -> None:
    """Triton kernels decorated from now on run in Triton's interpreter: the variable
    for a fresh import, and the knob itself where Triton is loaded already (a setdefault
    alone lost to an earlier value, and kernels came out compiled, failing on a CPU).

    Not enough where ``triton.language`` was imported before this: its own ``@jit``
    helpers (``tl.max``, ``tl.sum``, ``tl.cdiv``… in ``triton/language/standard.py``)
    were decorated then, compiled, and an interpreted kernel calling one fails with
    "Cannot call @triton.jit'd outside of the scope of a kernel". Such a process must
    run Triton code in a fresh interpreter (the sandbox's zygote sets the variable
    before anything imports Triton)."""
    import sys

    os.environ["TRITON_INTERPRET"] = "1"
    knobs = sys.modules.get("triton.knobs")
    if knobs is not None:
        knobs.runtime.interpret = True


def run_locally(
    code: str, calls: Sequence[Call], *, triton_interpret: bool = True
) -> list[CallResult]:
    """Run ``code``'s functions on ``calls`` here; their stdout and stderr are discarded.

    With ``triton_interpret`` (the default) ``TRITON_INTERPRET=1`` is set first, so
    Triton kernels run on the CPU as they do on a CPU worker.
    """
    if triton_interpret:
        _interpret_triton()
    payload = wire.encode({"code": code, "calls": [[c.function, list(c.args)] for c in calls]})
    request = wire.decode(payload, RESULT_LIMIT)
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        results = _call_all(request["code"], request["calls"])
    try:
        encoded = wire.encode(results)
    except wire.WireError as e:
        encoded = wire.encode(
            [{"value": None, "error": f"WireError: {e}", "seconds": r["seconds"]} for r in results]
        )
    return [
        CallResult(r["value"], r["error"], r["seconds"]) for r in wire.decode(encoded, RESULT_LIMIT)
    ]
