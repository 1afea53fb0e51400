"""Preload as the fork server does, then run block-quantize in forked children and print
(as one JSON line) the modules each child had to import that the parent had not. A
separate process: pytest's own may have done threaded torch work, after which a fork
can hang."""

from __future__ import annotations

import json
import os
import sys

from labs.base import EventContext
from labs.registry import all_labs
from labs.runtime.warm import preload


def new_modules(lab_id: str, params: dict[str, object]) -> list[str]:
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
            lab.execute(checked, EventContext(lambda kind, data: None))
            os.write(w, json.dumps(sorted(set(sys.modules) - before)).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise RuntimeError(f"the child failed ({status})")
    return list(json.loads(out))


def main() -> None:
    failed = preload()
    cases = json.loads(sys.argv[1])
    print(json.dumps({"failed": failed, "new": [new_modules(lab, p) for lab, p in cases]}))


if __name__ == "__main__":
    main()
