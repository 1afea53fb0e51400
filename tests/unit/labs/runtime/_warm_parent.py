"""A warm parent for the sandbox tests: a `lowbit worker` (settings from the
environment, credentials included: secret key, a database URL and a Redis URL with
a password, an engine and a queue holding them) that runs each case (JSON lines on
stdin) in a sandboxed child, exactly as the worker runs labs; prints one JSON line
per outcome. A separate process, because pytest's own process may have done
threaded torch work, after which a fork can hang."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.runs.catalog import lab_catalogue
from app.runs.worker import LabWorker
from app.settings import Settings
from labs.runtime.executor import Job
from labs.runtime.limits import MIB, SandboxConfig
from tests.conftest import TEST_LAB_MODULES


def credentials(secret: str) -> dict[str, str]:
    """Settings that put ``secret`` where a deployment keeps its credentials. Nothing
    listens on port 9: the engine and the Redis pool are built, never connected."""
    return {
        "LOWBIT_SECRET_KEY": secret,
        "LOWBIT_DATABASE_URL": f"postgresql+psycopg://lowbit:{secret}@127.0.0.1:9/lowbit",
        "LOWBIT_QUEUE_URL": f"redis://:{secret}@127.0.0.1:9/0",
    }


def processes_named(name: str) -> list[int]:
    """Host pids whose command name (``/proc/PID/comm``, 15 characters) is ``name``,
    zombies aside (they run nothing; their new parent has yet to reap them)."""
    found = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/comm", encoding="utf-8") as f:
                if not d.isdigit() or f.read().strip() != name[:15]:
                    continue
            with open(f"/proc/{d}/stat", encoding="utf-8") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    found.append(int(d))
        except OSError:
            pass
    return found


class WarmParent:
    """Client side: start the warm parent, send cases, read outcomes."""

    def __init__(self, data_dir: Path, secret: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.unit.labs.runtime._warm_parent", str(data_dir)],
            cwd=Path(__file__).resolve().parents[4],
            env={**os.environ, **credentials(secret)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        ready = json.loads(self.stdout.readline())
        self.port, self.unix_socket = int(ready["port"]), str(ready["unix"])

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        self.stdin.write(json.dumps(case) + "\n")
        self.stdin.flush()
        out: dict[str, Any] = json.loads(self.stdout.readline())
        return out

    def close(self) -> None:
        self.stdin.close()
        self.proc.wait(timeout=30)


def main() -> None:
    data_dir = Path(sys.argv[1])
    settings = Settings(env="test", data_dir=data_dir, extra_lab_modules=TEST_LAB_MODULES)
    worker = LabWorker(settings)  # its engine and queue pool hold the credentials
    worker.prepare()  # starts its fork server, as `lowbit worker` does
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    # A unix socket anyone may connect to, outside every hidden or covered path:
    # only the sandbox's masking of host sockets keeps a lab out.
    sock_dir = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else "/var/tmp")  # noqa: S108
    os.chmod(sock_dir, 0o755)
    unix_path = os.path.join(sock_dir, "service.sock")
    unix_listener = socket.socket(socket.AF_UNIX)
    unix_listener.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix_listener.listen()
    labs = lab_catalogue(settings)
    print(
        json.dumps({"ready": True, "port": listener.getsockname()[1], "unix": unix_path}),
        flush=True,
    )
    try:
        _serve(settings, worker, labs, sock_dir)
    finally:
        if worker.forks is not None:
            worker.forks.close()
        unix_listener.close()
        shutil.rmtree(sock_dir, ignore_errors=True)


def _serve(settings: Settings, worker: LabWorker, labs: dict[str, Any], sock_dir: str) -> None:
    listeners: list[socket.socket] = []
    for line in sys.stdin:
        case = json.loads(line)
        lab = labs[case.get("lab", "sandbox-probe")]
        if case.get("new_unix_socket"):
            # A service that started after the worker's last run: a spare child sandboxed
            # before it existed must not be the one that runs this case.
            path = os.path.join(sock_dir, f"new-{len(listeners)}.sock")
            listeners.append(socket.socket(socket.AF_UNIX))
            listeners[-1].bind(path)
            os.chmod(path, 0o777)
            listeners[-1].listen()
            case["params"]["target"] = path
        cfg = SandboxConfig(
            device=case.get("device", "cpu"),
            wall_s=lab.time_limit_s,
            memory_bytes=lab.memory_limit_mb * MIB,
            user=settings.sandbox_user,
            hide=worker.hidden_paths(),
        )
        events: list[tuple[str, dict]] = []
        started = time.monotonic()
        stop_after = case.get("stop_after")
        own_for = case.get("own_for")

        def sink(batch: list[tuple[str, dict]]) -> bool:
            events.extend(batch)
            return own_for is None or time.monotonic() - started < own_for

        def should_stop() -> bool:
            return stop_after is not None and time.monotonic() - started > stop_after

        out = worker.run_job(
            Job(lab, lab.params.model_validate(case["params"]), cfg), sink, should_stop
        )
        # A daemon the run left behind (setsid_escape): still alive now that it is over?
        survivors = processes_named(case["escape_name"]) if case.get("escape_name") else []
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)
        print(
            json.dumps(
                {
                    "survivors": survivors,
                    "status": out.status,
                    "reason": out.reason,
                    "error": out.error,
                    "result": out.result,
                    "sandbox": out.sandbox,
                    "environment": out.environment,
                    "events": events,
                    "seconds": time.monotonic() - started,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
