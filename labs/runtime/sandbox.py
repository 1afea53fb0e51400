"""The protections a lab child sets up on itself, right after the fork.

``enter`` runs in the forked child, before any lab code, in this order: new
mount and network namespaces; hidden paths (the data directory, every unix
socket on the host); every mount re-mounted read-only; a private, size-capped
tmpfs on ``/tmp``; resource limits; a scrubbed environment; the unprivileged
user; ``no_new_privs``. Each protection is recorded as ``{"enabled": bool,
"detail": str}`` whether or not the kernel allowed it: nothing is skipped
silently. The parent adds ``wall_time`` and ``output`` (it enforces those).

Imports no torch; ``prepare_torch`` does, inside the child only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import pwd
import resource
import signal
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MIB = 2**20

# Defaults every lab gets unless its metadata says otherwise.
OUTPUT_LIMIT_BYTES = 1_000_000  # events and printed output stored per run
RESULT_LIMIT_BYTES = 1_000_000  # the final result model, serialised
FILE_SIZE_LIMIT_BYTES = 64 * MIB  # largest file a lab may write (RLIMIT_FSIZE)
TMP_LIMIT_BYTES = 256 * MIB  # the private /tmp tmpfs
NPROC_LIMIT = 64  # tasks (processes and threads) of the sandbox user
NOFILE_LIMIT = 256  # open file descriptors
# torch intra-op threads per child: half the cores per concurrent run, at most this
# many. Small tensors run slower with more threads (thread start-up and spinning
# cost more than the work: 20 ms with 1 thread, 100-500 ms with 2 on 2 cores).
MAX_LAB_THREADS = 4
# CPU seconds allowed per wall second per thread, plus slack for start-up, before SIGXCPU.
CPU_SLACK_S = 2

# Environment variables a lab child keeps; everything else (secrets included) goes.
KEEP_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "LD_LIBRARY_PATH",
    "PYTORCH_CUDA_ALLOC_CONF",
    "LOWBIT_MODELS_DIR",  # extra Hugging Face checkpoints the model labs offer
)

# <linux/sched.h>, <linux/mount.h>, <linux/prctl.h>
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24
PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38
# Per-mount flags that a bind re-mount must repeat, or it would clear them.
_MOUNT_FLAGS = {
    "nosuid": MS_NOSUID,
    "nodev": MS_NODEV,
    "noexec": MS_NOEXEC,
    "noatime": MS_NOATIME,
    "nodiratime": MS_NODIRATIME,
    "relatime": MS_RELATIME,
    "strictatime": MS_STRICTATIME,
}
# Fields of /proc/self/stat after the command name: env_start and env_end are
# fields 50 and 51 of proc(5), i.e. indices 47 and 48 once the first two are cut.
_STAT_ENV_START = 47


@dataclass(frozen=True)
class SandboxConfig:
    """Limits for one run. Sizes in bytes, times in seconds."""

    wall_s: float
    memory_bytes: int
    device: str = "cpu"
    user: str = "nobody"
    hide: tuple[str, ...] = ()
    threads: int = 1
    output_bytes: int = OUTPUT_LIMIT_BYTES
    result_bytes: int = RESULT_LIMIT_BYTES
    file_bytes: int = FILE_SIZE_LIMIT_BYTES
    tmp_bytes: int = TMP_LIMIT_BYTES
    nproc: int = NPROC_LIMIT
    nofile: int = NOFILE_LIMIT
    keep_env: tuple[str, ...] = KEEP_ENV

    @property
    def cpu_s(self) -> int:
        return int(self.wall_s * self.threads) + CPU_SLACK_S


def lab_threads(concurrency: int) -> int:
    """torch threads for each of ``concurrency`` simultaneous lab children."""
    return max(1, min(MAX_LAB_THREADS, (os.cpu_count() or 1) // (2 * max(1, concurrency))))


@dataclass
class Protections:
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def set(self, name: str, enabled: bool, detail: str) -> None:
        self.items[name] = {"enabled": enabled, "detail": detail}

    def enabled(self, name: str) -> bool:
        return bool(self.items.get(name, {}).get("enabled"))


_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {target}")


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), "prctl")


def _unescape(path: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(esc, ch)
    return path


def _mounts() -> list[tuple[str, int, bool]]:
    """(mount point, per-mount flags to keep, already read-only) for every mount."""
    out = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 6:
                continue
            opts = parts[5].split(",")
            flags = 0
            for o in opts:
                flags |= _MOUNT_FLAGS.get(o, 0)
            out.append((_unescape(parts[4]), flags, "ro" in opts))
    return out


def unix_socket_paths() -> list[str]:
    """Filesystem paths of the unix sockets in this network namespace (from
    /proc/net/unix), skipping the NVIDIA driver's own. A new network namespace
    does not cut these off: they are masked by path instead."""
    paths: set[str] = set()
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
            next(f, None)
            for line in f:
                parts = line.split(maxsplit=7)
                if len(parts) == 8 and parts[7].startswith("/"):
                    path = parts[7].strip()
                    if "nvidia" not in path:
                        paths.add(path)
    except OSError:
        return []
    return sorted(paths)


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


TMP = "/tmp"  # noqa: S108 - replaced by a fresh private tmpfs in the child's mount namespace


def _needed_paths() -> list[str]:
    """What the interpreter may still read after the fork: its prefixes, sys.path
    and the executable's directory (a lab may import lazily or run ``python``)."""
    paths = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    }
    paths.update(p for p in sys.path if p)
    real = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    # Keep only top-most entries: a bind of a directory brings its subtree.
    return [p for p in real if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in real)]


def _closed_ancestor(path: str) -> str | None:
    """The top-most ancestor of ``path`` that other users cannot traverse (e.g. /root)."""
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        d = "/" + "/".join(parts[:i])
        if not os.stat(d).st_mode & stat.S_IXOTH:
            return d
    return None


def _filesystem(
    cfg: SandboxConfig, p: Protections, ids: tuple[int, int] | None, sockets: list[str]
) -> str:
    """Hide paths, cover /tmp and closed directories, expose the interpreter again,
    make every mount read-only. Returns the lab's temp dir."""
    uid, gid = ids or (os.getuid(), os.getgid())
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    hidden, failed = [], []
    for path in cfg.hide:
        try:
            if os.path.isdir(path):
                _mount(
                    "tmpfs",
                    path,
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=4k,mode=0000",
                )
            elif os.path.exists(path):
                _mount("/dev/null", path, None, MS_BIND)
            else:
                continue
            hidden.append(path)
        except OSError as e:
            failed.append(f"{path} ({e.strerror})")
    masked = 0
    for path in sockets:
        try:
            _mount("/dev/null", path, None, MS_BIND)
            masked += 1
        except OSError:
            failed.append(path)

    # Directories the sandbox user could not traverse (a Python under /root) are
    # covered with an empty tmpfs, and only the interpreter's own paths are bound
    # back in, so lazy imports keep working and nothing else there is visible.
    needed = _needed_paths() if ids is not None else []
    closed = sorted({a for a in map(_closed_ancestor, needed) if a})
    covered = [TMP, *closed]
    rebind = [n for n in needed if any(n.startswith(c + "/") for c in covered)]
    handles = {n: os.open(n, os.O_PATH) for n in rebind}
    _mount(
        "tmpfs",
        TMP,
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={cfg.tmp_bytes},mode=0700,uid={uid},gid={gid}",
    )
    for d in closed:
        _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
    for n, fd in handles.items():
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(n, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(n), exist_ok=True)
            open(n, "a").close()
        _mount(f"/proc/self/fd/{fd}", n, None, MS_BIND | MS_REC)
        os.close(fd)
    detail = f"hidden: {', '.join(hidden) or 'nothing'}; {masked} host unix socket(s) masked"
    if closed:
        detail += f"; covered {', '.join(closed)} except the interpreter ({', '.join(rebind)})"
    if failed:
        detail += f"; could not hide: {', '.join(failed[:5])}"
    p.set("hidden_paths", not failed, detail)

    ro_failed = []
    mounts = _mounts()
    for target, flags, readonly in mounts:
        if readonly or target == TMP:
            continue
        try:
            _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError as e:
            if e.errno not in (errno.ENOENT, errno.EACCES):
                ro_failed.append(target)
    p.set(
        "filesystem",
        not ro_failed,
        f"{len(mounts) - len(ro_failed) - 1} of {len(mounts) - 1} other mounts read-only"
        + (f"; still writable: {', '.join(ro_failed[:5])}" if ro_failed else "")
        + "; the lab writes only to its private /tmp",
    )
    p.set(
        "tmpdir", True, f"private tmpfs on /tmp, {cfg.tmp_bytes // MIB} MiB, gone when the run ends"
    )
    return TMP


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
        f"RLIMIT_CPU {cfg.cpu_s} s ({cfg.threads} threads × {cfg.wall_s:g} s + slack)",
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


def enter(
    cfg: SandboxConfig,
    fallback_tmp: str,
    parent_pid: int,
    scrub: Callable[[], str] | None = None,
) -> tuple[Protections, str]:
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
            tmpdir = _filesystem(cfg, p, ids, sockets)
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
    os.chdir(tmpdir)
    _limits(cfg, p, will_drop_root=ids is not None)
    _environment(cfg, p, tmpdir)
    detail = "inherited file descriptors closed (database and queue connections included)"
    if scrub is not None:
        detail += "; " + scrub()
    p.set("secrets", True, detail)
    _drop_user(cfg, p, ids)
    try:
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        p.set("no_new_privs", True, "set-uid programs cannot raise privileges")
    except OSError as e:
        p.set("no_new_privs", False, str(e))
    # After the user switch, which clears it: die with the worker thread.
    try:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))
    except OSError:
        pass
    if os.getppid() != parent_pid:
        os._exit(1)
    return p, tmpdir


def prepare_torch(cfg: SandboxConfig, p: Protections) -> dict[str, Any]:
    """Thread count and GPU memory cap, in the child; returns what the device is."""
    import torch

    torch.set_num_threads(cfg.threads)
    env: dict[str, Any] = {"torch": torch.__version__, "threads": torch.get_num_threads()}
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
