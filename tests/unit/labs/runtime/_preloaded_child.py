"""Preload as the fork server does, then run labs in forked children and print (as one
JSON line) the modules each child had to import that the parent had not, and how many
regular expressions it had to compile (``re``'s cache misses). A separate process:
pytest's own may have done threaded torch work, after which a fork can hang."""

from __future__ import annotations

import json
import os
import re._compiler
import sys

from labs.base import EventContext
from labs.registry import all_labs
from labs.runtime.warm import preload

_compiled = [0]
_compile = re._compiler.compile


def _counting_compile(*args: object, **kwargs: object) -> object:
    _compiled[0] += 1
    return _compile(*args, **kwargs)  # type: ignore[arg-type]


def new_work(lab_id: str, params: dict[str, object]) -> dict[str, object]:
    lab = dict(all_labs())[lab_id]
    checked = lab.validate(params)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reported through the pipe
        code = 1
        try:
            import torch

            torch.set_num_threads(1)
            before = set(sys.modules)
            re._compiler.compile = _counting_compile  # type: ignore[assignment]
            lab.execute(checked, EventContext(lambda kind, data: None))
            new = sorted(set(sys.modules) - before)
            os.write(w, json.dumps({"modules": new, "regexes": _compiled[0]}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"the child failed ({status})")
    return dict(json.loads(out))


def main() -> None:
    failed = preload()
    cases = json.loads(sys.argv[1])
    print(json.dumps({"failed": failed, "new": [new_work(lab, p) for lab, p in cases]}))


if __name__ == "__main__":
    main()
