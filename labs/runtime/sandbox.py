"""The protections a lab child sets up on itself, right after the fork.

``enter`` runs in the forked child, before any lab code, in this order: new
mount and network namespaces; hidden paths (the data directory, every unix
socket on the host); every mount re-mounted read-only; a private, size-capped
tmpfs on ``/tmp``; a fresh ``/proc`` when the child is PID 1 of its own PID
namespace (``trees``); resource limits; a scrubbed environment; the unprivileged
user; ``no_new_privs``. Each protection is recorded as ``{"enabled": bool,
"detail": str}`` whether or not the kernel allowed it: nothing is skipped
silently. The parent adds ``wall_time`` and ``output`` (it enforces those), and
the process that forked the child adds ``secrets`` and ``process_tree``.

Imports no torch; ``prepare_torch`` does, inside the child only.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import resource
import signal
from typing import Any

from labs.runtime.limits import MIB, Protections, SandboxConfig
from labs.runtime.mounts import (
    LIBC,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    check,
    filesystem,
    mount,
    unix_socket_paths,
)

# <linux/sched.h>, <linux/prctl.h> (the mount flags are in mounts.py)
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
# Fields of /proc/self/stat after the command name: env_start and env_end are
# fields 50 and 51 of proc(5), i.e. indices 47 and 48 once the first two are cut.
_STAT_ENV_START = 47


def _unshare(flags: int) -> None:
    check(LIBC.unshare(ctypes.c_int(flags)), "unshare")


def _prctl(option: int, arg: int) -> None:
    check(LIBC.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), "prctl")


def die_with_parent() -> None:
    """SIGKILL this process when the thread that forked it exits (PR_SET_PDEATHSIG)."""
    try:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except OSError:
        pass


def sandbox_ids(user: str) -> tuple[int, int] | None:
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        return None
    return pw.pw_uid, pw.pw_gid


def _namespaces(p: Protections) -> tuple[bool, bool]:
    """Enter new mount and network namespaces; (mount ns, net ns) obtained."""
    try:
        if os.geteuid() == 0:
            _unshare(CLONE_NEWNS | CLONE_NEWNET)
        else:
            # Unprivileged: a user namespace grants the capabilities for the other two.
            uid, gid = os.getuid(), os.getgid()
            _unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET)
            for name, text in (
                ("setgroups", "deny"),
                ("uid_map", f"{uid} {uid} 1"),
                ("gid_map", f"{gid} {gid} 1"),
            ):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        return True, True
    except OSError as e:
        reason = str(e)
    try:
        _unshare(CLONE_NEWNET)
        return False, True
    except OSError:
        p.set("network", False, f"the kernel refused a network namespace: {reason}")
        return False, False


def _vm_size_bytes() -> int:
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _limits(cfg: SandboxConfig, p: Protections, will_drop_root: bool) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cfg.cpu_s, cfg.cpu_s + 1))
    p.set(
        "cpu_time",
        True,
        f"RLIMIT_CPU {cfg.cpu_s} s ({max(cfg.threads, cfg.cpus)} threads × {cfg.wall_s:g} s + slack)",
    )
    resource.setrlimit(resource.RLIMIT_FSIZE, (cfg.file_bytes, cfg.file_bytes))
    # Writes past the limit then fail with EFBIG instead of killing the lab.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    p.set("file_size", True, f"RLIMIT_FSIZE {cfg.file_bytes // MIB} MiB per file")
    resource.setrlimit(resource.RLIMIT_NOFILE, (cfg.nofile, cfg.nofile))
    p.set("open_files", True, f"RLIMIT_NOFILE {cfg.nofile}")
    if cfg.device == "cpu":
        # The fork shares the warm parent's mappings (torch alone is ~1 GB of
        # address space), so the cap is what the lab may add on top of them.
        base = _vm_size_bytes()
        cap = base + cfg.memory_bytes
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        p.set(
            "memory",
            True,
            f"RLIMIT_AS {cap // MIB} MiB = {base // MIB} MiB preloaded interpreter + {cfg.memory_bytes // MIB} MiB for the lab",
        )
    else:
        p.set(
            "memory",
            False,
            "no RLIMIT_AS on a CUDA worker (CUDA reserves huge virtual ranges); GPU memory is capped per process instead, host memory is not capped",
        )
    if will_drop_root or os.geteuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg.nproc, cfg.nproc))
        p.set(
            "processes",
            True,
            f"RLIMIT_NPROC {cfg.nproc} tasks for uid {'sandbox' if will_drop_root else os.getuid()}",
        )
    else:
        p.set(
            "processes",
            False,
            "running as root without a sandbox user: RLIMIT_NPROC does not apply to root",
        )


def _environment(cfg: SandboxConfig, p: Protections, tmpdir: str) -> None:
    keep = {k: os.environ[k] for k in cfg.keep_env if k in os.environ}
    removed = len(os.environ) - len(keep)
    os.environ.clear()
    zeroed = _zero_initial_environ()
    os.environ.update(keep)
    os.environ.update(
        {
            "HOME": tmpdir,
            "TMPDIR": tmpdir,
            "MPLCONFIGDIR": os.path.join(tmpdir, ".matplotlib"),
            "OMP_NUM_THREADS": str(cfg.threads),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    os.environ.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    p.set(
        "environment",
        True,
        f"{removed} variables removed, kept {', '.join(sorted(keep)) or 'none'}; "
        + (
            "inherited environ block zeroed"
            if zeroed
            else "inherited environ block could not be zeroed"
        ),
    )


def _zero_initial_environ() -> bool:
    """Overwrite the environment strings inherited from the worker's exec
    (still in this process's memory and in /proc/self/environ)."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start, end = int(fields[_STAT_ENV_START]), int(fields[_STAT_ENV_START + 1])
        if 0 < start < end:
            ctypes.memset(start, 0, end - start)
            return True
    except (OSError, ValueError, IndexError):
        pass
    return False


def _drop_user(cfg: SandboxConfig, p: Protections, ids: tuple[int, int] | None) -> None:
    if os.geteuid() != 0:
        p.set("user", True, f"worker is not root: lab runs as uid {os.getuid()}")
        return
    if ids is None:
        p.set("user", False, f"sandbox user {cfg.user!r} does not exist: lab runs as root")
        return
    uid, gid = ids
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    p.set("user", True, f"uid {uid} gid {gid} ({cfg.user}), no supplementary groups")


def _process_view(p: Protections, mount_ns: bool) -> None:
    """PID 1 of a new PID namespace (see ``trees``): a fresh, read-only /proc shows
    the lab its own processes only, not the host's."""
    if os.getpid() != 1:
        p.set("process_view", False, "no PID namespace: /proc shows every process on the host")
        return
    if not mount_ns:
        p.set("process_view", False, "no mount namespace for a fresh /proc: the host's shows")
        return
    try:
        mount("proc", "/proc", "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
        p.set("process_view", True, "own read-only /proc: the lab sees only its own processes")
    except OSError as e:
        p.set("process_view", False, f"could not mount a fresh /proc: {e}")


def enter(cfg: SandboxConfig, fallback_tmp: str, parent_pid: int) -> tuple[Protections, str]:
    """Apply every protection to the calling (child) process. Returns what is in
    force and the lab's temp dir."""
    p = Protections()
    ids = sandbox_ids(cfg.user) if os.geteuid() == 0 else None
    sockets = unix_socket_paths()  # the host's: read before leaving its network namespace
    mount_ns, net_ns = _namespaces(p)
    if net_ns:
        p.set("network", True, "new network namespace with no interfaces up (not even loopback)")
    tmpdir = fallback_tmp
    if mount_ns:
        try:
            tmpdir = filesystem(cfg, p, ids, sockets)
        except OSError as e:
            p.set("filesystem", False, f"mount namespace set-up failed: {e}")
    if not mount_ns or not p.enabled("filesystem"):
        p.items.setdefault(
            "filesystem",
            {
                "enabled": False,
                "detail": "no mount namespace: the lab can write wherever its user may",
            },
        )
        p.set("tmpdir", True, f"private directory {tmpdir} (mode 0700), removed after the run")
        p.items.setdefault(
            "hidden_paths",
            {
                "enabled": False,
                "detail": "no mount namespace: paths are protected by file permissions only",
            },
        )
    if not os.path.isdir(tmpdir):  # a half-built mount namespace may have covered it
        os.makedirs(tmpdir, mode=0o700)
        if ids is not None:
            os.chown(tmpdir, *ids)
    _process_view(p, mount_ns)
    os.chdir(tmpdir)
    _limits(cfg, p, will_drop_root=ids is not None)
    _environment(cfg, p, tmpdir)
    _drop_user(cfg, p, ids)
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        p.set("no_new_privs", True, "set-uid programs cannot raise privileges")
    except OSError as e:
        p.set("no_new_privs", False, str(e))
    die_with_parent()  # again: the user switch cleared it
    if os.getppid() != parent_pid:
        os._exit(1)
    return p, tmpdir


# glibc's malloc maps every block over 128 KiB afresh and unmaps it when freed, so a fresh
# child page-faults in each new tensor again (a model lab: ~200k faults, 0.7 s of system
# time here). Up to these sizes freed memory stays in the heap for the next tensor, and
# larger ones are still returned at once; a child lives for one run.
MMAP_THRESHOLD = 32 * MIB
TRIM_THRESHOLD = 128 * MIB
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def keep_freed_memory() -> bool:
    """Raise glibc malloc's mmap and trim thresholds (quant-algorithms' default run: 211k
    → 90k page faults, 0.74 → 0.49 s of system time); False where malloc is not glibc's."""
    try:
        mallopt = LIBC.mallopt
    except AttributeError:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


def prepare_torch(cfg: SandboxConfig, p: Protections) -> dict[str, Any]:
    """Thread count and GPU memory cap, in the child; returns what the device is."""
    import torch

    from labs.quant.parallel import set_workers

    torch.set_num_threads(cfg.threads)
    set_workers(max(cfg.threads, cfg.cpus))
    keep_freed_memory()
    env: dict[str, Any] = {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "chunk_threads": max(cfg.threads, cfg.cpus),
    }
    if cfg.device == "cuda" and torch.cuda.is_available():
        idx = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        fraction = min(1.0, cfg.memory_bytes / props.total_memory)
        torch.cuda.set_per_process_memory_fraction(fraction, idx)
        p.set(
            "gpu_memory",
            True,
            f"torch caps this process at {fraction:.3f} of {props.total_memory / 2**30:.1f} GiB ({cfg.memory_bytes // MIB} MiB)",
        )
        env.update(
            device=f"cuda:{idx}",
            gpu=props.name,
            compute_capability=f"{props.major}.{props.minor}",
            gpu_memory_bytes=props.total_memory,
            cuda_runtime=torch.version.cuda,
            cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        )
    else:
        env.update(device="cpu", cuda_runtime=torch.version.cuda)
        if cfg.device == "cuda":
            env["note"] = "the worker reported a GPU but CUDA is not available in the lab process"
    return env
