"""The judge sandbox against hostile code: each test runs a real submission in the
real bubblewrap + seccomp sandbox and checks it was contained.

(The same attacks go through the real server, queue and worker in
tests/integration/test_judge_escapes.py.)
"""

from __future__ import annotations

import os
import shutil
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labs.judge.policy import Limits
from labs.judge.sandbox import Execution, Judge, JudgeUnavailable

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="make install adds bubblewrap"
)

FAST = Limits(wall_s=3.0, cpu_s=3, tmp_bytes=8 * 2**20, output_bytes=4096)
SECRET = "lowbit-test-secret-4711"


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    os.environ["LOWBIT_SECRET_KEY"] = SECRET  # the worker's environment holds a secret
    j = Judge(FAST)
    try:
        yield j
    finally:
        j.close()
        os.environ.pop("LOWBIT_SECRET_KEY", None)


def run(judge: Judge, body: str, limits: Limits | None = None) -> Execution:
    code = "def attack():\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return judge.run(code, [("attack", ())], limits)


def value(e: Execution) -> object:
    assert e.status == "ok", (e.status, e.message, e.output)
    assert e.results is not None
    return e.results[0]["error"] or e.results[0]["value"]


def test_runs_code_and_returns_values_and_output(judge: Judge) -> None:
    code = (
        "import torch\ndef f(x, n):\n    print('scale', n)\n    return (x * n, b'\\x01', n + 1)\n"
    )
    import torch

    e = judge.run(code, [("f", (torch.arange(3.0), 2))])
    assert e.status == "ok" and e.results is not None
    got, raw, n = e.results[0]["value"]
    assert got.tolist() == [0.0, 2.0, 4.0] and raw == b"\x01" and n == 3
    assert e.output == "scale 2\n" and not e.output_truncated
    for name in ("namespaces", "user", "capabilities", "seccomp", "no_new_privs", "network"):
        assert e.protections[name]["enabled"], name
    assert e.protections["process_tree"]["enabled"]


def test_errors_name_the_solution_not_the_runner(judge: Judge) -> None:
    e = judge.run("def f():\n    return 1 / 0\n", [("f", ()), ("g", ())])
    assert e.results is not None
    first, second = (r["error"] for r in e.results)
    assert "<solution>/solution.py" in first and "ZeroDivisionError" in first
    assert "runner" not in first and "/judge" not in first
    assert "no function named 'g'" in second
    syntax = judge.run("def f(:\n", [("f", ())])
    assert syntax.results is not None and "SyntaxError" in syntax.results[0]["error"]


@pytest.mark.parametrize("port", [5432, 6379, 8000])
def test_no_tcp_to_the_database_queue_or_web_port(judge: Judge, port: int) -> None:
    err = value(
        run(
            judge,
            f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
            except OSError as e:
                return f"refused: {{e}}"
            return "connected"
            """,
        )
    )
    assert str(err).startswith("refused"), err


@pytest.mark.parametrize(
    "path",
    [
        "/proc/1/environ",
        str(Path(__file__).resolve()),  # the project tree
        str(Path(__file__).resolve().parents[3] / "data" / "lowbit.db"),
        "/etc/passwd",
        "/root/.bash_history",
    ],
)
def test_cannot_read_outside_files(judge: Judge, path: str) -> None:
    got = value(
        run(
            judge,
            f"""
            try:
                return open({path!r}, "rb").read(100)
            except OSError as e:
                return "denied: " + type(e).__name__
            """,
        )
    )
    assert str(got).startswith("denied"), got


def test_environment_holds_no_secret(judge: Judge) -> None:
    got = value(
        run(
            judge,
            """
            import os
            seen = dict(os.environ)
            for pid in os.listdir("/proc"):
                try:
                    seen[pid] = open(f"/proc/{pid}/environ", "rb").read().decode()
                except OSError:
                    pass
            return repr(seen)
            """,
        )
    )
    assert SECRET not in str(got)


def test_writes_only_to_a_capped_tmp(judge: Judge) -> None:
    got = value(
        run(
            judge,
            """
            out = []
            for p in ("/usr/evil", "/judge/runner.py", "/evil", "/dev/evil", "/proc/evil"):
                try:
                    open(p, "w").write("x")
                    out.append("wrote " + p)
                except OSError:
                    out.append("no")
            written = 0
            try:
                for i in range(100):
                    with open(f"/tmp/fill{i}", "wb") as f:
                        f.write(b"x" * 2**20)
                    written += 1
            except OSError as e:
                out.append(type(e).__name__)
            return out + [written]
            """,
        )
    )
    assert isinstance(got, list)
    assert got[:5] == ["no"] * 5 and got[5] == "OSError" and got[6] < 9


def test_nothing_survives_into_the_next_submission(judge: Judge) -> None:
    run(judge, "open('/tmp/other-learner.txt', 'w').write('my code')\nreturn 1\n")
    got = value(run(judge, "import os\nreturn os.listdir('/tmp') + os.listdir('/tmp/work')\n"))
    assert got == ["work"]


def test_fork_bomb_is_contained(judge: Judge) -> None:
    e = run(
        judge,
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    )
    assert e.status == "timed_out"
    assert e.protections["process_tree"]["enabled"]
    assert value(run(judge, "return 'alive'")) == "alive"


LAB_THREADS = """
import os, pwd, resource, threading, time
pw = pwd.getpwnam(os.environ["LAB_USER"])
os.setgroups([]); os.setgid(pw.pw_gid); os.setuid(pw.pw_uid)
resource.setrlimit(resource.RLIMIT_NPROC, (64, 64))  # the lab sandbox's NPROC_LIMIT
threads = [threading.Thread(target=time.sleep, args=(0.2,)) for _ in range(8)]
for t in threads:
    t.start()
print("started", len(threads))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="users and their task counts need root")
def test_a_fork_bomb_leaves_lab_runs_their_threads(judge: Judge) -> None:
    """RLIMIT_NPROC counts a uid's tasks across the host: while a learner's fork bomb
    fills its task limit, a lab child (the sandbox user, NPROC 64) must still start its
    threads. They shared uid 65534, and a lab run failed with "can't start new thread"."""
    import subprocess
    import sys
    import threading

    from app.settings import Settings
    from labs.runtime.limits import NPROC_LIMIT

    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    ended: list[Execution] = []
    t = threading.Thread(target=lambda: ended.append(run(judge, bomb)))
    t.start()
    try:
        time.sleep(1.5)  # the bomb has filled its limit by now
        env = {**os.environ, "LAB_USER": Settings().sandbox_user}
        lab = subprocess.run(
            [sys.executable, "-c", LAB_THREADS.replace("64, 64", f"{NPROC_LIMIT}, {NPROC_LIMIT}")],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        t.join()
    assert ended and ended[0].status == "timed_out"
    assert lab.returncode == 0, lab.stderr[-400:]
    assert lab.stdout.strip() == "started 8"


def test_twenty_gib_allocation_fails(judge: Judge) -> None:
    got = value(run(judge, "x = bytearray(20 * 2**30)\nreturn len(x)\n"))
    assert "MemoryError" in str(got)
    got = value(run(judge, "import torch\nreturn torch.empty(5 * 2**30).sum()\n"))
    assert "alloc" in str(got).lower()


def test_busy_loop_times_out_and_the_tree_goes(judge: Judge) -> None:
    e = run(judge, "import os\nos.fork()\nwhile True:\n    pass\n")
    assert e.status == "timed_out" and "time limit" in (e.message or "")
    assert e.protections["process_tree"]["enabled"]
    assert e.seconds < FAST.wall_s + 1


def test_huge_output_is_capped_and_flagged(judge: Judge) -> None:
    e = run(
        judge, "import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)\nreturn 1\n"
    )
    assert e.status == "ok" and e.output_truncated
    assert e.output_bytes >= 100 * 2**20 and len(e.output) == FAST.output_bytes


@pytest.mark.parametrize(
    ("name", "number", "args"),
    [
        ("ptrace", 101, (16, 1, 0, 0)),  # PTRACE_ATTACH to pid 1
        ("mount", 165, (0, 0, 0, 0)),
        ("unshare", 272, (0x10000000, 0, 0, 0)),  # CLONE_NEWUSER
        ("bpf", 321, (0, 0, 0, 0)),
        ("keyctl", 250, (0, 0, 0, 0)),
        ("clone", 56, (0x10000000 | 17, 0, 0, 0)),  # a child in a new user namespace
        ("perf_event_open", 298, (0, 0, 0, 0)),
    ],
)
def test_dangerous_system_calls_are_refused(
    judge: Judge, name: str, number: int, args: tuple[int, ...]
) -> None:
    got = value(
        run(
            judge,
            f"""
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            rc = libc.syscall({number}, *(ctypes.c_long(a) for a in {args!r}))
            return [rc, ctypes.get_errno()]
            """,
        )
    )
    assert got == [-1, 1], (name, got)  # EPERM


def test_sleeping_forever_after_closing_stdout_times_out(judge: Judge) -> None:
    e = run(judge, "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(3600)\n")
    assert e.status == "timed_out"


def test_a_daemon_does_not_outlive_the_submission(judge: Judge) -> None:
    e = run(
        judge,
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(0.5)
                open("/tmp/daemon-was-here", "w").write("x")
                time.sleep(3600)
            os._exit(0)
        return "parent done"
        """,
    )
    assert value(e) == "parent done" and e.protections["process_tree"]["enabled"]
    got = value(run(judge, "import os, time\ntime.sleep(1)\nreturn sorted(os.listdir('/tmp'))\n"))
    assert got == ["work"]
    procs = value(
        run(judge, "import os\nreturn len([p for p in os.listdir('/proc') if p.isdigit()])\n")
    )
    assert procs == 3  # bwrap's init, the zygote, this submission


def test_killing_the_zygote_only_restarts_the_sandbox(judge: Judge) -> None:
    e = run(
        judge,
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nimport time\ntime.sleep(60)\n",
    )
    assert e.status == "error" and "restarted" in (e.message or "")
    assert value(run(judge, "return 'back'")) == "back"


def test_refuses_without_bubblewrap() -> None:
    j = Judge(FAST, bwrap="")
    with pytest.raises(JudgeUnavailable, match="bubblewrap"):
        j.run("def f():\n    return 1\n", [("f", ())])


def test_the_sandbox_runs_in_its_own_cgroup_where_one_can_be_made(judge: Judge) -> None:
    e = run(judge, "return 1")
    cg = e.protections["cgroup"]
    if os.geteuid() == 0 and Path("/sys/fs/cgroup/pids").is_dir():
        assert cg["enabled"], cg
        procs = [Path(d) / "cgroup.procs" for d in judge._cgroup.dirs]
        inside = {int(p) for f in procs for p in f.read_text().split()}
        assert judge._proc is not None and judge._proc.pid in inside  # bwrap, born inside
    else:
        assert not cg["enabled"] and "not available" in cg["detail"]


def test_cgroups_v1_and_v2_limits_are_written(tmp_path: Path) -> None:
    from labs.judge import cgroups

    for controller in ("memory", "pids"):
        (tmp_path / "v1" / controller).mkdir(parents=True)
    v1 = cgroups.create(2**30, 100, root=tmp_path / "v1")
    assert v1.enabled and "v1" in v1.detail
    assert {d.parent.name: sorted(p.name for p in d.iterdir()) for d in v1.dirs} == {
        "memory": ["memory.limit_in_bytes"],
        "pids": ["pids.max"],
    }
    wrapped = v1.wrap(["bwrap", "--x"])
    assert wrapped[:2] == ["/bin/sh", "-c"] and wrapped[-3:] == ["--", "bwrap", "--x"]
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "cgroup.controllers").write_text("memory pids")
    v2 = cgroups.create(2**30, 100, root=tmp_path / "v2")
    assert v2.enabled and (v2.dirs[0] / "memory.max").read_text() == str(2**30)
    missing = cgroups.create(2**30, 100, root=tmp_path / "none")
    assert not missing.enabled and missing.wrap(["bwrap"]) == ["bwrap"]


def test_a_checkout_under_tmp_neither_hides_nor_shows_in_the_private_tmp(
    monkeypatch: Any,
) -> None:
    """A clone under /tmp failed every submission with "No module named 'torch'": the
    private tmpfs on /tmp covered its venv's packages, bound where they lie. Bound at a
    fixed path of their own, they are found, and the learner's /tmp holds only its own
    files (a first fix that mounted the tmpfs first showed the checkout's path there)."""
    from labs.judge import policy

    packages = "/tmp/checkout/.venv/lib/python3.11/site-packages"  # noqa: S108
    monkeypatch.setattr(policy, "python_paths", lambda: ("/usr/bin/python3", [packages]))
    args = policy.bwrap_args("bwrap", 3, 4, FAST, as_root=True)
    binds = {args[i + 1]: args[i + 2] for i, a in enumerate(args) if a == "--ro-bind"}
    inside = binds[packages]
    assert not inside.startswith("/tmp")  # noqa: S108
    assert not any(there.startswith("/tmp") for there in binds.values())  # noqa: S108
    assert args[-1] == inside  # the runner puts it on sys.path


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, seen from the host's /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def test_cancelling_stops_the_tree_at_once_and_keeps_the_zygote(judge: Judge) -> None:
    """A cancel (``should_stop``) ends a busy loop and the process it forked well before
    the time limit; the same warm sandbox, emptied, takes the next submission."""
    judge.start()
    assert judge._proc is not None
    sandbox, idle = judge._proc.pid, len(_descendants(judge._proc.pid))
    seen: list[int] = []
    asked = time.monotonic() + 0.6

    def should_stop() -> bool:
        if time.monotonic() > asked - 0.1 and not seen:
            seen.append(len(_descendants(sandbox)))  # the child and its fork are running
        return time.monotonic() > asked

    code = (
        "def attack():\n    import os\n    open('/tmp/left.txt', 'w').write('x')\n"
        "    os.fork()\n    while True:\n        pass\n"
    )
    e = judge.run(code, [("attack", ())], FAST, should_stop)
    waited = time.monotonic() - asked
    assert e.status == "cancelled" and e.results is None, (e.status, e.message)
    assert waited < 1.0 < FAST.wall_s  # not the time limit
    assert seen and seen[0] >= idle + 2
    assert e.protections["process_tree"]["enabled"]
    assert judge._proc is not None and judge._proc.pid == sandbox  # not restarted
    assert len(_descendants(sandbox)) == idle  # bwrap's init and the zygote only
    got = value(run(judge, "import os\nreturn sorted(os.listdir('/tmp'))\n"))
    assert got == ["work"] and judge._proc.pid == sandbox


def test_a_cancel_while_the_sandbox_starts_leaves_it_starting_for_the_next() -> None:
    """Cancelled before the zygote is ready: the submission ends at once, no code ran,
    and the next submission gets the same sandbox once it is ready, not a new one."""
    j = Judge(FAST)
    try:
        asked = time.monotonic() + 0.3
        e = j.run("def f():\n    return 1\n", [("f", ())], FAST, lambda: time.monotonic() > asked)
        assert e.status == "cancelled" and e.results is None
        assert time.monotonic() - asked < 1.0
        assert e.protections["process_tree"]["detail"] == "cancelled before any code ran"
        assert j._proc is not None and j._proc.poll() is None
        starting = j._proc.pid
        assert value(j.run("def attack():\n    return 'ran'\n", [("attack", ())])) == "ran"
        assert j._proc.pid == starting
    finally:
        j.close()
