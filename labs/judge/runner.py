"""The untrusted side of the judge: runs inside the bubblewrap sandbox, never outside.

Started by ``labs.judge.sandbox`` as ``python -E -s -S /judge/runner.py SITE...``
with a unix socket on fd 3. It is the *zygote*: it drops to the sandbox user, makes
itself undumpable, imports torch once (the ~1-3 s every submission would otherwise
pay) and then waits. For each submission the worker sends four fresh pipes over the
socket (the payload to read, the output to write, the results to write, and a cancel
pipe the worker writes to when the learner cancels); the zygote forks one child,
which re-applies the per-submission limits, reads the learner's code and the calls
from its own pipe (so the zygote never holds a learner's code or data), runs them
and writes the encoded return values. When the child ends, the wall time runs out
or the submission is cancelled, the zygote kills every process left in the sandbox,
empties /tmp and reports. Grading happens outside: this file only computes the
learner's outputs.

Standard library, torch and ``wire`` only: the project tree is not mounted here.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
import time
import traceback
from typing import Any

if __package__:
    from labs.judge import wire
else:  # inside the sandbox: /judge/wire.py beside this file
    import wire  # type: ignore[no-redef]

RESULT_FD = 3  # in the child, once the control socket is closed
SOLUTION_FILE = "<solution>/solution.py"
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's private tmpfs, not the host's
WORK_DIR = SANDBOX_TMP + "/work"
SANDBOX_UID = 65533
SANDBOX_GID = 65534
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
EXIT_LIMITS_FAILED = 71  # the child could not apply a limit: never runs the code
EXIT_BAD_PAYLOAD = 72


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _status_field(name: str) -> str:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def drop_privileges() -> dict[str, dict[str, Any]]:
    """Become the unprivileged sandbox user (when started as root) and check it held."""
    if os.getuid() == 0:
        os.setgroups([])
        os.setgid(SANDBOX_GID)
        os.setuid(SANDBOX_UID)
    _prctl(PR_SET_DUMPABLE, 0)  # other sandbox processes cannot open our /proc/pid/mem
    _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans come back to us to be reaped
    uid, caps = os.getuid(), _status_field("CapEff")
    with open("/proc/net/dev", encoding="ascii") as f:
        interfaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
    seccomp, nnp = _status_field("Seccomp"), _status_field("NoNewPrivs")
    return {
        "user": {"enabled": uid != 0, "detail": f"uid {uid} inside the sandbox"},
        "capabilities": {"enabled": int(caps or "1", 16) == 0, "detail": f"CapEff {caps}"},
        "seccomp": {"enabled": seccomp == "2", "detail": f"Seccomp mode {seccomp} (2 = filter)"},
        "no_new_privs": {"enabled": nnp == "1", "detail": f"NoNewPrivs {nnp}"},
        "network": {
            "enabled": interfaces in ([], ["lo"]),
            "detail": f"own network namespace, interfaces: {', '.join(interfaces) or 'none'}",
        },
    }


def warm_up(site_dirs: list[str]) -> None:
    sys.path[:0] = site_dirs
    import torch  # noqa: F401 - the point of the zygote

    torch.set_num_threads(1)


def _send(ctrl: socket.socket, message: dict[str, Any]) -> None:
    ctrl.sendall(json.dumps(message).encode() + b"\n")


def _receive(ctrl: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    fds = array.array("i")
    data, anc, _flags, _addr = ctrl.recvmsg(65536, socket.CMSG_SPACE(16 * fds.itemsize))
    if not data:
        return None
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return json.loads(data), list(fds)


def _set_limits(limits: dict[str, Any]) -> None:
    cpu = int(limits["cpu_s"])
    for which, value in (
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, int(limits["as"])),
        (resource.RLIMIT_NPROC, int(limits["nproc"])),
        (resource.RLIMIT_FSIZE, int(limits["fsize"])),
        (resource.RLIMIT_NOFILE, int(limits["nofile"])),
    ):
        resource.setrlimit(which, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _error_text(e: BaseException) -> str:
    """The exception with only the learner's own frames: no runner paths."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == SOLUTION_FILE]
    lines = traceback.format_list(frames)
    lines += traceback.format_exception_only(type(e), e)
    return "".join(lines).rstrip()


def _run_calls(code: str, calls: list[Any]) -> list[dict[str, Any]]:
    namespace: dict[str, Any] = {"__name__": "solution", "__file__": SOLUTION_FILE}
    try:
        exec(compile(code, SOLUTION_FILE, "exec"), namespace)  # noqa: S102 - sandboxed
    except BaseException as e:  # noqa: BLE001 - any failure is the learner's to read
        text = _error_text(e)
        return [{"value": None, "error": text, "seconds": 0.0} for _ in calls]
    results = []
    for function, args in calls:
        start = time.perf_counter()
        fn = namespace.get(function)
        try:
            if not callable(fn):
                raise NameError(f"your code defines no function named {function!r}")
            value, error = fn(*args), None
        except BaseException as e:  # noqa: BLE001
            value, error = None, _error_text(e)
        results.append({"value": value, "error": error, "seconds": time.perf_counter() - start})
    return results


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit:
        chunk = os.read(fd, min(1 << 20, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _on_device(v: Any, device: str) -> Any:
    """``v`` with every tensor in it moved to ``device`` (the results come back to the
    CPU in ``wire.encode``)."""
    import torch

    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, list | tuple):
        return type(v)(_on_device(x, device) for x in v)
    if isinstance(v, dict):
        return {k: _on_device(x, device) for k, x in v.items()}
    return v


def child_main(control_fd: int, fds: list[int], limits: dict[str, Any]) -> None:
    """One submission. Never returns: exits the process."""
    payload_r, out_w, result_w = fds
    try:
        os.close(control_fd)
        os.dup2(payload_r, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.dup2(result_w, RESULT_FD)
        os.closerange(RESULT_FD + 1, 1 << 16)
        os.makedirs(WORK_DIR, exist_ok=True)
        os.chdir(WORK_DIR)
        _set_limits(limits)
    except OSError as e:
        os.write(2, f"sandbox set-up failed: {e}\n".encode())
        os._exit(EXIT_LIMITS_FAILED)
    try:
        data = _read_all(0, int(limits["payload"]) + 1)
        request = wire.decode(data, int(limits["payload"]))
        code, calls = request["code"], request["calls"]
    except Exception:  # noqa: BLE001 - the worker wrote it; report, never run
        os._exit(EXIT_BAD_PAYLOAD)
    if limits.get("device") == "cuda":  # a GPU worker: the learner's kernels get CUDA tensors
        calls = [[function, _on_device(args, "cuda")] for function, args in calls]
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = sys.stdout
    results = _run_calls(code, calls)
    try:
        encoded = wire.encode(results)
    except Exception as e:  # noqa: BLE001 - a return value the wire cannot carry
        msg = f"{type(e).__name__}: {e}"
        encoded = wire.encode(
            [{"value": None, "error": msg, "seconds": r["seconds"]} for r in results]
        )
    try:
        sys.stdout.flush()
        with os.fdopen(RESULT_FD, "wb") as f:
            f.write(encoded)
    except OSError:
        pass
    os._exit(0)


def kill_all() -> int:
    """SIGKILL every process in the sandbox but this one and bwrap's init; reap them.

    Returns how many remained after the last try (0: the tree is gone).
    """
    me, left = os.getpid(), []
    for _ in range(200):
        try:
            os.kill(-1, signal.SIGKILL)  # every process we may signal, never ourselves
        except ProcessLookupError:
            pass
        _reap()
        left = [p for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me)]
        if not left:
            return 0
        time.sleep(0.005)
    return len(left)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wipe_tmp() -> None:
    """Empty /tmp, even where the child removed its own write permission."""
    for root, dirs, files in os.walk(SANDBOX_TMP, topdown=False):
        for name in files:
            _remove(os.path.join(root, name), os.unlink)
        for name in dirs:
            _remove(os.path.join(root, name), os.rmdir)


def _remove(path: str, how: Any) -> None:
    try:
        how(path)
        return
    except OSError:
        pass
    try:  # the child may have taken away our write permission on its directories
        os.chmod(os.path.dirname(path), stat.S_IRWXU)
        if not os.path.islink(path) and os.path.isdir(path):
            os.chmod(path, stat.S_IRWXU)
        how(path)
    except OSError:
        pass


def supervise(ctrl: socket.socket, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
    """Fork the child for one submission, wait for it to exit, its wall time to run
    out or the worker to cancel it (a byte, or EOF, on the cancel pipe), then kill
    whatever is left and empty /tmp. The zygote itself stays, warm for the next one."""
    limits = message["limits"]
    cancel_r = fds[3]
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(cancel_r)
        child_main(ctrl.fileno(), fds[:3], limits)
    for fd in fds[:3]:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd, cancel_r], [], [], float(limits["wall_s"]))
    seconds = time.monotonic() - start
    report: dict[str, Any] = {"op": "done", "seconds": round(seconds, 4)}
    if pidfd in ready:
        _, status, usage = os.wait4(pid, 0)
        report["max_rss_kib"] = usage.ru_maxrss
        report["exit_code"] = os.waitstatus_to_exitcode(status)
        report["status"] = "exited"
        if report["exit_code"] == -signal.SIGXCPU:
            report["status"] = "timed_out"
    else:
        report["status"] = "cancelled" if ready else "timed_out"
    os.close(pidfd)
    os.close(cancel_r)
    report["left_behind"] = kill_all()
    wipe_tmp()
    return report


def zygote(control_fd: int, site_dirs: list[str]) -> None:
    ctrl = socket.socket(fileno=control_fd)
    try:
        protections = drop_privileges()
        warm_up(site_dirs)
    except Exception as e:  # noqa: BLE001
        _send(ctrl, {"op": "failed", "error": f"{type(e).__name__}: {e}"})
        return
    _send(ctrl, {"op": "ready", "protections": protections})
    while True:
        received = _receive(ctrl)
        if received is None:
            return  # the worker closed the socket: the sandbox ends
        message, fds = received
        if message.get("op") != "run" or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            _send(ctrl, {"op": "failed", "error": "bad request"})
            continue
        _send(ctrl, supervise(ctrl, message, fds))


if __name__ == "__main__":
    zygote(int(sys.argv[1]), sys.argv[2:])
