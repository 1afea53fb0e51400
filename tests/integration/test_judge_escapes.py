"""Hostile learner code through the real server, queue and worker, on both stacks:
each attack is a submission to the test exercise ``judge-echo`` (tests/fixtures/judge),
whose ``solve`` does the attack and returns what it saw; the grader puts that value
in the test's message, which the API returns.

The same attacks run against the sandbox alone in tests/unit/judge/test_sandbox.py.
"""

from __future__ import annotations

import shutil
import textwrap
import threading
import time
from typing import Any

import httpx
import pytest

from app.settings import ROOT
from tests.integration.conftest import Stack, read_sse, start, wait_final, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="make install adds bubblewrap"
)

EXERCISE = "judge-echo"
FINAL = ("passed", "failed", "error", "timed_out", "cancelled")


def submit(c: httpx.Client, code: str, mode: str = "examples") -> str:
    r = c.post(f"/api/exercises/{EXERCISE}/submissions", json={"code": code, "mode": mode})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["status"] == "queued" and body["url"] == f"/api/submissions/{body['id']}"
    return str(body["id"])


def judged(c: httpx.Client, code: str, mode: str = "examples") -> dict[str, Any]:
    sid = submit(c, code, mode)

    def done() -> dict[str, Any] | None:
        sub: dict[str, Any] = c.get(f"/api/submissions/{sid}").json()
        return sub if sub["status"] in FINAL else None

    return wait_for(done, timeout=90, message=f"submission {sid} never ended")  # type: ignore[no-any-return]


def attack(body: str) -> str:
    return "def solve(x):\n" + textwrap.indent(textwrap.dedent(body), "    ")


def seen(sub: dict[str, Any]) -> str:
    """What the attack returned (the grader's message shows the learner's value)."""
    assert sub["status"] in ("passed", "failed"), sub
    return str(sub["tests"][0]["message"])


def test_reference_passes_and_a_wrong_answer_fails(live: Stack) -> None:
    c = live.learner()
    ok = judged(c, "def solve(x):\n    print('thinking')\n    return x + 1\n", "submit")
    assert ok["status"] == "passed" and [t["passed"] for t in ok["tests"]] == [True, True]
    assert ok["output"] == "thinking\nthinking\n" and ok["exercise"] == EXERCISE
    assert ok["sandbox"]["seccomp"]["enabled"] and ok["sandbox"]["process_tree"]["enabled"]
    bad = judged(c, "def solve(x):\n    return x\n")
    assert bad["status"] == "failed" and "expected 2, got 1" in bad["tests"][0]["message"]
    broken = judged(c, "def solve(x:\n")
    assert broken["status"] == "error" and "SyntaxError" in broken["message"]


def test_submissions_stream_until_judged(live: Stack) -> None:
    c = live.learner()
    sid = submit(c, "def solve(x):\n    return x + 1\n")
    events = read_sse(c, f"/api/submissions/{sid}/events")
    assert events[-1][0] == "end" and events[-1][2]["status"] == "passed"


def test_bad_requests_are_422_404_and_429(live: Stack) -> None:
    c = live.learner()
    url = f"/api/exercises/{EXERCISE}/submissions"
    big = c.post(url, json={"code": "#" * (64 * 1024 + 1), "mode": "examples"})
    assert big.status_code == 422 and "64 KiB" in big.json()["detail"]
    not_utf8 = c.post(url, content=b'{"code": "\xff", "mode": "examples"}')
    assert not_utf8.status_code == 422 and "UTF-8" in not_utf8.json()["detail"]
    surrogate = c.post(url, content=b'{"code": "\\ud800", "mode": "examples"}')
    assert surrogate.status_code == 422 and "UTF-8" in surrogate.json()["detail"]
    mode = c.post(url, json={"code": "x = 1", "mode": "grade-me"})
    assert mode.status_code == 422 and "mode" in mode.json()["detail"]
    assert c.post("/api/exercises/no-such/submissions", json={"code": ""}).status_code == 404
    sid = judged(c, "def solve(x):\n    return x + 1\n")["id"]
    assert live.learner().get(f"/api/submissions/{sid}").status_code == 404  # not theirs
    slow = attack("import time\ntime.sleep(2)\nreturn x + 1\n")
    for _ in range(2):  # LOWBIT_MAX_ACTIVE_RUNS=2: the third waits its turn
        submit(c, slow)
    over = c.post(url, json={"code": slow, "mode": "examples"})
    assert over.status_code == 429 and "limit" in over.json()["detail"]


@pytest.mark.parametrize("port", ["web", 5432, 6379])
def test_no_tcp_to_the_web_server_database_or_redis(live: Stack, port: Any) -> None:
    target = int(live.url.rsplit(":", 1)[1]) if port == "web" else port
    got = seen(
        judged(
            live.learner(),
            attack(
                f"""
                import socket
                try:
                    socket.create_connection(("127.0.0.1", {target}), timeout=2)
                    return "connected"
                except OSError as e:
                    return "refused " + type(e).__name__
                """
            ),
        )
    )
    assert "refused" in got and "connected" not in got


def test_cannot_read_the_database_environment_or_project(live: Stack) -> None:
    db_file = live.settings.data_dir / "lowbit.db"
    paths = [str(db_file), "/proc/1/environ", str(ROOT / "app" / "settings.py"), str(ROOT / ".git")]
    got = seen(
        judged(
            live.learner(),
            attack(
                f"""
                import os
                out = []
                for p in {paths!r}:
                    try:
                        open(p, "rb").read(10)
                        out.append("READ " + p)
                    except OSError as e:
                        out.append("denied")
                env = dict(os.environ)
                out.append("env:" + ",".join(sorted(env)))
                return out
                """
            ),
        )
    )
    assert "READ /" not in got and got.count("denied") == len(paths)
    assert "LOWBIT" not in got and "SECRET" not in got and "DATABASE" not in got


def test_another_learners_submission_is_not_visible(live: Stack) -> None:
    marker = "learner-a-secret-code-31337"
    a, b = live.learner(), live.learner()
    judged(
        a,
        f"# {marker}\nopen('/tmp/work/mine.py', 'w').write({marker!r})\ndef solve(x):\n    return x + 1\n",
    )
    got = seen(
        judged(
            b,
            attack(
                f"""
                import os
                hits = []
                for root, _, files in os.walk("/tmp"):
                    hits += [os.path.join(root, f) for f in files]
                for pid in os.listdir("/proc"):
                    try:
                        if {marker!r}.encode() in open(f"/proc/{{pid}}/cmdline", "rb").read():
                            hits.append(pid)
                    except OSError:
                        pass
                return hits
                """
            ),
        )
    )
    assert marker not in got and "mine.py" not in got and "[]" in got


def test_writes_stay_in_the_capped_tmp(live: Stack) -> None:
    got = seen(
        judged(
            live.learner(),
            attack(
                f"""
                out = []
                for p in ("/usr/evil", "/evil", {str(ROOT / "evil")!r}):
                    try:
                        open(p, "w").write("x")
                        out.append("WROTE " + p)
                    except OSError:
                        out.append("no")
                try:
                    for i in range(1000):
                        open(f"/tmp/fill{{i}}", "wb").write(b"x" * 2**20)
                    out.append("FILLED")
                except OSError as e:
                    out.append("full")
                return out
                """
            ),
        )
    )
    assert "WROTE" not in got and "FILLED" not in got and "full" in got
    assert not (ROOT / "evil").exists()


@pytest.mark.parametrize(
    ("name", "body"),
    [
        (
            "fork bomb",
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        ),
        ("busy loop", "while True:\n    pass\n"),
        ("closed stdout", "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(3600)\n"),
    ],
)
def test_runaways_time_out_and_leave_nothing(live: Stack, name: str, body: str) -> None:
    c = live.learner()
    sub = judged(c, attack(body))
    assert sub["status"] == "timed_out", (name, sub)
    assert sub["sandbox"]["process_tree"]["enabled"], name
    procs = seen(
        judged(c, attack("import os\nreturn len([p for p in os.listdir('/proc') if p.isdigit()])"))
    )
    assert "got 3" in procs  # bwrap's init, the zygote, this submission


LOOP_FOREVER = "import os\nopen('/tmp/left', 'w').write('x')\nos.fork()\nwhile True:\n    pass\n"
NOT_STARTED = "cancelled before any code ran"


def cancelled_while_running(c: httpx.Client) -> tuple[dict[str, Any], float]:
    """Submit a busy loop, cancel it once it runs; the submission and the seconds from
    the cancel to its end."""
    sid = submit(c, attack(LOOP_FOREVER))
    wait_for(
        lambda: c.get(f"/api/submissions/{sid}").json()["status"] == "running" or None,
        timeout=90,
        message="the submission never started",
        every=0.05,
    )
    time.sleep(0.3)
    asked = time.monotonic()
    r = c.post(f"/api/runs/{sid}/cancel")
    assert r.status_code == 200 and r.json()["cancel_requested"], r.text

    def ended() -> dict[str, Any] | None:
        sub: dict[str, Any] = c.get(f"/api/submissions/{sid}").json()
        return sub if sub["status"] in FINAL else None

    sub = wait_for(ended, timeout=10, message="the cancelled submission never ended", every=0.05)
    waited = time.monotonic() - asked
    assert sub["status"] == "cancelled" and "Cancelled" in sub["message"], sub
    assert waited < 2.5, waited  # the time limit is 3 s: stopped by the cancel, not by it
    assert c.get(f"/api/runs/{sid}").json()["status"] == "cancelled"
    return sub, waited


def test_cancelling_a_running_submission_stops_it_at_once(live: Stack) -> None:
    """POST /api/runs/{id}/cancel on a running submission: the busy loop (and what it
    forked) is killed well before the exercise's 3 s limit, the run ends cancelled, and
    the warm sandbox, emptied, judges the next submission. A cancel that lands while a
    worker thread still starts its sandbox stops that too; each try warms one more
    thread, so within a few the cancel hits running code."""
    c = live.learner()
    for _ in range(4):
        sub, _waited = cancelled_while_running(c)
        tree = sub["sandbox"]["process_tree"]
        assert tree["enabled"], tree
        if tree["detail"] != NOT_STARTED:
            break
    assert tree["detail"] == "every process the submission started was killed", tree
    after = judged(
        c,
        attack(
            "import os\nreturn [len([p for p in os.listdir('/proc') if p.isdigit()]),"
            " sorted(os.listdir('/tmp'))]"
        ),
    )
    assert "got [3, ['work']]" in seen(after)  # bwrap's init, the zygote, this one; /tmp emptied
    assert judged(c, "def solve(x):\n    return x + 1\n")["status"] == "passed"


def test_a_stopping_worker_hands_a_running_submission_back(live: Stack) -> None:
    """Two SIGTERMs stop a worker at once: the submission's code is stopped as for a
    cancel, but the learner did not ask, so it goes back to the queue (not cancelled)
    and the next worker judges it."""
    c = live.learner()
    live.stop_workers(first=1)  # one worker, so nothing takes the submission it hands back
    assert live.worker is not None
    sid = submit(c, attack("import time\ntime.sleep(1.5)\nreturn x + 1\n"))
    wait_for(lambda: live.run_row(sid).status == "running", 90, "it never started", every=0.05)
    live.worker.stop(signals=2)
    row = live.run_row(sid)
    assert row.status == "queued" and row.attempts == 0, (row.status, row.attempts)
    assert c.get(f"/api/submissions/{sid}").json()["status"] == "queued"
    live.ensure_running()

    def done() -> dict[str, Any] | None:
        sub: dict[str, Any] = c.get(f"/api/submissions/{sid}").json()
        return sub if sub["status"] in FINAL else None

    assert wait_for(done, timeout=90, message="never judged again")["status"] == "passed"


def test_twenty_gib_fails_inside_the_sandbox(live: Stack) -> None:
    sub = judged(live.learner(), attack("return len(bytearray(20 * 2**30))"))
    assert sub["status"] == "failed" and "MemoryError" in sub["tests"][0]["message"]


def test_a_hundred_megabytes_of_output_is_capped_and_flagged(live: Stack) -> None:
    sub = judged(
        live.learner(),
        attack("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)\nreturn x + 1"),
    )
    assert sub["status"] == "passed" and sub["output_truncated"]
    assert 0 < len(sub["output"]) <= 64 * 1024


def test_dangerous_system_calls_are_refused(live: Stack) -> None:
    got = seen(
        judged(
            live.learner(),
            attack(
                """
                import ctypes
                libc = ctypes.CDLL(None, use_errno=True)
                out = {}
                for name, nr, arg in (("ptrace", 101, 16), ("mount", 165, 0), ("unshare", 272, 0x10000000),
                                      ("bpf", 321, 0), ("keyctl", 250, 0)):
                    rc = libc.syscall(nr, ctypes.c_long(arg), ctypes.c_long(1), 0, 0)
                    out[name] = (rc, ctypes.get_errno())
                return out
                """
            ),
        )
    )
    for name in ("ptrace", "mount", "unshare", "bpf", "keyctl"):
        assert f"'{name}': (-1, 1)" in got, got  # EPERM


def test_a_daemon_does_not_outlive_its_submission(live: Stack) -> None:
    c = live.learner()
    daemon = attack(
        """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(1)
                open("/tmp/daemon-was-here", "w").write("x")
                time.sleep(3600)
            os._exit(0)
        return x + 1
        """
    )
    assert judged(c, daemon)["status"] == "passed"
    got = seen(
        judged(c, attack("import os, time\ntime.sleep(1.5)\nreturn sorted(os.listdir('/tmp'))"))
    )
    assert "daemon-was-here" not in got


def test_ten_learners_at_once_keep_lab_runs_flowing(live: Stack) -> None:
    learners = [live.learner() for _ in range(10)]
    results: list[Any] = []
    lab_user = live.learner()
    run_id = start(lab_user, "sandbox-probe", {"mode": "ok"})

    def one(c: httpx.Client) -> None:
        try:
            sub = judged(c, "def solve(x):\n    return x + 1\n", "submit")
            # The whole submission when it did not pass: its message says why.
            results.append("passed" if sub["status"] == "passed" else str(sub))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(c,)) for c in learners]
    for t in threads:
        t.start()
    lab = wait_final(lab_user, run_id, timeout=120)
    for t in threads:
        t.join(timeout=120)
    assert lab["status"] == "succeeded", lab
    assert results == ["passed"] * 10
