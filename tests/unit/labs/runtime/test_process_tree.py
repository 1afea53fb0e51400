"""The fallbacks of process-tree containment (``labs.runtime.trees``), each forced on a
fork server: a cgroup v2 killed whole where PID namespaces are refused, and, with
neither, a record that says the tree is not contained. The PID namespace itself is
proven by test_sandbox (it is what a root worker gets)."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from labs.runtime.executor import Job, Outcome, execute
from labs.runtime.forkserver import ForkServer
from labs.runtime.limits import MIB, SandboxConfig
from labs.runtime.probe import PROBES
from labs.runtime.trees import cgroup_base
from tests.conftest import TEST_LAB_MODULES
from tests.unit.labs.runtime._warm_parent import processes_named

LAB = PROBES[0]
EXIT_GRACE_S = 1.0


def _run(server: ForkServer, params: dict[str, Any]) -> Outcome:
    cfg = SandboxConfig(wall_s=LAB.time_limit_s, memory_bytes=LAB.memory_limit_mb * MIB)
    # This process only reads the child's pipes: the fork happens in the server.
    return execute(Job(LAB, LAB.params.model_validate(params), cfg), lambda _: True, launch=server)


def _escape(server: ForkServer) -> tuple[Outcome, list[int]]:
    name = "lowbit-" + secrets.token_hex(4)
    out = _run(server, {"mode": "setsid_escape", "target": name})
    # A killed cgroup is empty once its tasks are exiting; give them a moment to be gone.
    deadline = time.monotonic() + EXIT_GRACE_S
    while (survivors := processes_named(name)) and time.monotonic() < deadline:
        time.sleep(0.01)
    for pid in survivors:
        os.kill(pid, 9)
    return out, survivors


@pytest.fixture(scope="module")
def cgroup_server() -> Iterator[ForkServer]:
    if os.geteuid() != 0 or cgroup_base() is None:
        pytest.skip("needs a writable cgroup v2 (root)")
    server = ForkServer(TEST_LAB_MODULES.split(","), trees="cgroup")
    yield server
    server.close()


def test_a_cgroup_kills_a_setsid_daemon_with_the_run(cgroup_server: ForkServer) -> None:
    out, survivors = _escape(cgroup_server)
    assert out.status == "succeeded", out
    assert survivors == []
    tree = out.sandbox["process_tree"]
    assert tree["enabled"] and "cgroup" in tree["detail"] and "removed" in tree["detail"], tree
    # No PID namespace here, and the record says so rather than claiming a private /proc.
    assert out.sandbox["process_view"]["enabled"] is False
    assert out.sandbox["secrets"]["enabled"]


def test_without_containment_the_record_says_so() -> None:
    server = ForkServer(TEST_LAB_MODULES.split(","), trees="none")
    try:
        out, survivors = _escape(server)
    finally:
        server.close()
    assert out.status == "succeeded", out
    assert survivors  # the daemon did escape: the record must not claim otherwise
    tree = out.sandbox["process_tree"]
    assert tree["enabled"] is False and "setsid" in tree["detail"], tree


def test_a_fork_server_that_dies_mid_run_fails_the_run_and_is_restarted() -> None:
    server = ForkServer(TEST_LAB_MODULES.split(","))
    try:
        slow = PROBES[1]
        cfg = SandboxConfig(wall_s=slow.time_limit_s, memory_bytes=slow.memory_limit_mb * MIB)
        job = Job(slow, slow.params.model_validate({"mode": "sleep", "seconds": 20}), cfg)
        assert server.proc is not None
        killer = threading.Timer(0.5, server.proc.kill)
        killer.start()
        started = time.monotonic()
        out = execute(job, lambda _: True, launch=server)
        killer.join()
        assert out.status == "failed" and out.reason == "sandbox", out
        assert "fork server" in str(out.error) and time.monotonic() - started < 5
        again = _run(server, {"mode": "ok"})  # a new server takes the next run
        assert again.status == "succeeded", again
    finally:
        server.close()


@pytest.mark.parametrize("kind", ["none", "cgroup"])
def test_after_reaping_nothing_is_signalled_by_pid(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # A reaped child's PID (and its group's id) may already belong to another
    # process: the group is killed while the child is a zombie (trees.reap), and
    # finish() afterwards signals nothing by PID.
    from labs.runtime import trees

    pid = os.fork()
    if pid == 0:
        os._exit(0)
    tree = trees.Tree(pid, kind, "test", cgroup=str(tmp_path) if kind == "cgroup" else None)
    signalled: list[tuple[str, int]] = []
    monkeypatch.setattr(os, "kill", lambda p, s: signalled.append(("kill", p)))
    monkeypatch.setattr(os, "killpg", lambda p, s: signalled.append(("killpg", p)))
    monkeypatch.setattr(trees, "CGROUP_EMPTY_S", 0.0)
    done = trees.reap(pid, tree)
    assert done is not None and done[0] == pid
    assert ("killpg", pid) in signalled  # killed while it was a zombie
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # and reaped
    signalled.clear()
    tree.finish()
    assert signalled == []
