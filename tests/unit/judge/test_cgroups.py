"""Judge cgroups a dead worker left behind are removed at the next judge start, and
only those: a live worker's, a busy one and anything not named as the judge names
its cgroups stay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.settings import ROOT
from labs.judge import cgroups


def dead_pid() -> int:
    p = subprocess.Popen(["true"])  # noqa: S607
    p.wait()
    return p.pid


@pytest.mark.parametrize("version", [1, 2])
def test_only_a_dead_workers_empty_cgroups_are_removed(tmp_path: Path, version: int) -> None:
    if version == 2:
        (tmp_path / "cgroup.controllers").write_text("memory pids")
        parents = [tmp_path]
    else:
        parents = [tmp_path / "memory", tmp_path / "pids"]
    dead, alive = dead_pid(), os.getpid()
    names = {
        "stale": f"lowbit-judge-{dead}-a1b2c3",
        "live worker": f"lowbit-judge-{alive}-a1b2c3",
        "busy": f"lowbit-judge-{dead}-d4e5f6",
        "not ours": f"lowbit-{dead}-a1b2c3",
        "odd name": f"lowbit-judge-{dead}-a1b2c3-x",
    }
    for parent in parents:
        for name in names.values():
            (parent / name).mkdir(parents=True)
        (parent / names["busy"] / "cgroup.procs").write_text(f"{alive}\n")
    removed = cgroups.remove_stale(root=tmp_path)
    assert sorted(removed) == sorted(p / names["stale"] for p in parents)
    for parent in parents:
        assert sorted(d.name for d in parent.iterdir() if d.is_dir()) == sorted(
            n for k, n in names.items() if k != "stale"
        )


KEEP_A_SANDBOX = """
import sys, time
from labs.judge.sandbox import Judge
j = Judge()
j.start()
print(" ".join(str(d) for d in j._cgroup.dirs), flush=True)
time.sleep(600)
"""


NEXT_START = "from labs.judge.sandbox import Judge\nj = Judge()\nj.start()\nj.close()\n"


@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/sys/fs/cgroup/pids").is_dir(),
    reason="making cgroup v1 folders needs root",
)
def test_a_sigkilled_workers_sandbox_cgroups_go_at_the_next_start() -> None:
    """SIGKILL gives a worker no chance to remove its sandbox's cgroups: they stay
    (empty once bubblewrap died with its parent) until the next judge start."""
    worker = subprocess.Popen(
        [sys.executable, "-c", KEEP_A_SANDBOX], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        dirs = [Path(d) for d in worker.stdout.readline().split()]
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    assert dirs and all(d.name.startswith(f"lowbit-judge-{worker.pid}-") for d in dirs)
    deadline = time.monotonic() + 10
    while any((d / "cgroup.procs").read_text().strip() for d in dirs):
        assert time.monotonic() < deadline, "the sandbox outlived its worker"
        time.sleep(0.05)
    assert all(d.is_dir() for d in dirs)  # left behind
    subprocess.run([sys.executable, "-c", NEXT_START], cwd=ROOT, check=True, timeout=120)
    assert not any(d.exists() for d in dirs)
