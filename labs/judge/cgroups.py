"""A cgroup per judge sandbox, where the machine lets the worker make one: a memory
limit and a task limit over everything in the sandbox together (the rlimits bound each
process; this bounds their sum). cgroup v1 (``memory`` and ``pids`` hierarchies) or v2
(the unified hierarchy, with both controllers delegated). Where neither can be made the
sandbox runs without one and records why: it is a protection "where available".
"""

from __future__ import annotations

import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# A shell that moves itself into the cgroups, then becomes bubblewrap: every process of
# the sandbox is born inside them (no window in which a fork escapes).
REMOVE_PATIENCE_S = 2.0
ENTER = 'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 70; shift; done; shift; exec "$@"'


# Every judge cgroup is named lowbit-judge-<the worker's pid>-<6 hex digits>.
PREFIX = "lowbit-judge-"
NAME = re.compile(r"lowbit-judge-(\d+)-[0-9a-f]{6}")


@dataclass
class Cgroup:
    dirs: list[Path] = field(default_factory=list)
    detail: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.dirs)

    def wrap(self, args: list[str]) -> list[str]:
        """``args`` started inside the cgroups (unchanged when there are none)."""
        if not self.dirs:
            return args
        procs = [str(d / "cgroup.procs") for d in self.dirs]
        return ["/bin/sh", "-c", ENTER, "sh", *procs, "--", *args]

    def remove(self) -> None:
        """Remove the cgroups once the sandbox is gone; its PID namespace may take a
        moment to empty, so each is retried for up to REMOVE_PATIENCE_S."""
        deadline = time.monotonic() + REMOVE_PATIENCE_S
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a process of the sandbox is still dying
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        self.dirs = []


def _make(d: Path, settings: dict[str, int]) -> None:
    d.mkdir()
    try:
        for name, value in settings.items():
            (d / name).write_text(str(value))
    except OSError:
        d.rmdir()
        raise


def create(memory_bytes: int, tasks: int, root: Path = CGROUP_ROOT) -> Cgroup:
    """New cgroups limiting memory and tasks, or an empty ``Cgroup`` saying why not."""
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
    if (root / "cgroup.controllers").is_file():  # v2 only
        try:
            _make(root / name, {"memory.max": memory_bytes, "pids.max": tasks})
        except OSError as e:
            return Cgroup(detail=f"not available: cgroup v2 refused ({e.strerror})")
        return Cgroup([root / name], f"cgroup v2: memory {memory_bytes >> 20} MiB, {tasks} tasks")
    made: list[Path] = []
    try:
        for controller, settings in (
            ("memory", {"memory.limit_in_bytes": memory_bytes}),
            ("pids", {"pids.max": tasks}),
        ):
            _make(root / controller / name, settings)
            made.append(root / controller / name)
    except OSError as e:
        Cgroup(made).remove()
        return Cgroup(detail=f"not available: cgroup v1 refused ({e.strerror or e})")
    return Cgroup(made, f"cgroup v1: memory {memory_bytes >> 20} MiB, {tasks} tasks")


def remove_stale(root: Path = CGROUP_ROOT) -> list[Path]:
    """Remove the judge cgroups a dead worker left (SIGKILLed, it could not remove
    them): only folders named as ``create`` names them, whose worker pid is gone and
    which hold no process. Another live worker's cgroups are never touched. Returns
    what was removed."""
    parents = (
        [root] if (root / "cgroup.controllers").is_file() else [root / "memory", root / "pids"]
    )
    removed = []
    for parent in parents:
        try:
            names = [e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for name in names:
            d = parent / name
            m = NAME.fullmatch(name)
            if m is None or _alive(int(m.group(1))) or _has_processes(d):
                continue
            try:
                d.rmdir()
            except OSError:  # busy after all, or not ours to remove
                continue
            removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _has_processes(d: Path) -> bool:
    try:
        return bool((d / "cgroup.procs").read_text().split())
    except FileNotFoundError:
        return False
    except OSError:
        return True
