"""The judge's sandbox, declared in one place: bubblewrap's arguments, the seccomp
deny list and the limits every submission gets.

Flatpak builds an app's view of the system the same way: an empty root, read-only
binds of exactly what is needed, a private tmpfs, new namespaces and a filter
compiled from a readable list. ``bwrap_args`` and ``SECCOMP_DENY`` are that list
here; ``labs.judge.sandbox`` only runs it and records what held.
"""

from __future__ import annotations

import errno
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from labs.judge.gpu import GpuAccess

MIB = 2**20
GIB = 2**30

# Where the two trusted files the sandbox runs are mounted inside it.
RUNNER_DIR = "/judge"
# Where the environment's package directories are mounted inside it (read-only).
PACKAGES_DIR = "/judge/packages"
# The private tmpfs inside the sandbox (not the host's /tmp).
SANDBOX_TMP = "/tmp"  # noqa: S108
# The user learner code runs as when the worker is root: a uid of its own (no passwd
# entry needed), not the lab children's `nobody` (65534). RLIMIT_NPROC counts tasks per
# uid across the host, so a learner's fork bomb sharing nobody's count would leave lab
# runs unable to start a thread ("can't start new thread") until it is killed.
SANDBOX_UID = 65533
SANDBOX_GID = 65534

# System calls learner code never needs; each fails with EPERM. Namespaces and mounts
# (escaping the sandbox), tracing and reading other processes' memory, kernel keyrings,
# BPF programs, performance counters, io_uring (a second syscall interface seccomp
# cannot see into), kernel modules and the like.
SECCOMP_DENY = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_by_handle_at",
    "name_to_handle_at",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "syslog",
    "quotactl",
    "fsopen",
    "fsmount",
    "fsconfig",
    "move_mount",
    "open_tree",
    "mount_setattr",
)
# clone() with any of these flags would create a namespace (<linux/sched.h>).
CLONE_NAMESPACE_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)
AF_UNIX = 1
TIOCSTI = 0x5412  # pushes characters into a terminal's input


@dataclass(frozen=True)
class Limits:
    """Per-submission limits. Times in seconds, sizes in bytes."""

    wall_s: float = 10.0
    cpu_s: int = 10
    # Address space of the whole process: torch alone maps ~650 MB.
    address_space_bytes: int = 3 * GIB
    nproc: int = 64  # tasks (processes and threads) of the sandbox user
    file_bytes: int = 16 * MIB
    nofile: int = 128
    tmp_bytes: int = 64 * MIB
    output_bytes: int = 64 * 1024  # captured stdout + stderr kept
    result_bytes: int = 64 * MIB  # the encoded return values
    payload_bytes: int = 64 * MIB  # code + encoded arguments

    def for_child(self) -> dict[str, float | int]:
        return {
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            "as": self.address_space_bytes,
            "nproc": self.nproc,
            "fsize": self.file_bytes,
            "nofile": self.nofile,
            "payload": self.payload_bytes,
        }


def seccomp_filter(out: IO[bytes]) -> None:
    """Write the compiled BPF program (libseccomp, native arch only) to ``out``.

    Other architectures' system calls (i386, x32) are killed by libseccomp's default
    bad-arch action, so the deny list cannot be bypassed through them.
    """
    import pyseccomp as sc  # the libseccomp binding; imported where it is used

    f = sc.SyscallFilter(sc.ALLOW)
    for name in SECCOMP_DENY:
        f.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in _bits(CLONE_NAMESPACE_FLAGS):
        f.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory seccomp cannot read: say it does not exist,
    # and glibc falls back to clone(), whose flags are checked above.
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for call in ("socket", "socketpair"):
        f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.NE, AF_UNIX))
    f.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, TIOCSTI))
    f.export_bpf(out)


def _bits(mask: int) -> list[int]:
    return [1 << i for i in range(mask.bit_length()) if mask >> i & 1]


def python_paths() -> tuple[str, list[str]]:
    """(the base interpreter, the package directories the sandbox may read)."""
    exe = os.path.realpath(sys.executable)
    paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    return exe, sorted(p for p in paths if os.path.isdir(p))


def bwrap_args(
    bwrap: str,
    seccomp_fd: int,
    control_fd: int,
    limits: Limits,
    as_root: bool,
    gpu: GpuAccess | None = None,
) -> list[str]:
    """The whole sandbox as one bubblewrap command line (up to the interpreter).

    Without ``gpu`` no ``/dev/nvidia*`` is there and Triton runs in its interpreter;
    with it (a Triton exercise on a GPU worker, ``labs.judge.gpu``) exactly its device
    nodes are bound, the driver's libraries are readable and Triton compiles."""
    exe, packages = python_paths()
    args = [bwrap, "--die-with-parent", "--new-session"]
    args += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    args += ["--unshare-cgroup-try"]
    if not as_root:
        # Unprivileged bwrap needs a user namespace; forbid any further one inside.
        args += ["--unshare-user", "--disable-userns"]
    # else: no user namespace, which would map the sandbox user to root outside; the
    # runner drops to SANDBOX_UID itself before it reads any learner input.
    for top in ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(top), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    args += ["--perms", "01777", "--size", str(limits.tmp_bytes), "--tmpfs", SANDBOX_TMP]
    base = str(Path(sys.base_prefix).resolve())
    binds = [] if base.startswith("/usr/") else [base]
    made: set[str] = set()
    # The environment's packages at fixed paths of their own, not where the checkout
    # keeps them: a checkout under /tmp would otherwise show inside the private /tmp.
    inside = [f"{PACKAGES_DIR}/{i}" for i in range(len(packages))]
    args += ["--perms", "0755", "--dir", RUNNER_DIR, "--perms", "0755", "--dir", PACKAGES_DIR]
    for path, there in zip(packages, inside, strict=True):
        args += ["--ro-bind", path, there]
    if gpu is not None:
        binds += [d for d in gpu.library_binds if d not in binds]
    for path in binds:
        # bwrap would copy the mode of a parent such as /root (0700): the sandbox user
        # must be able to walk down to the interpreter.
        for parent in reversed(Path(path).parents[:-1]):
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", path, path]
    here = Path(__file__).resolve().parent
    for name in ("runner.py", "wire.py"):
        args += ["--ro-bind", str(here / name), f"{RUNNER_DIR}/{name}"]
    args += ["--proc", "/proc", "--dev", "/dev"]
    for host, inside_path in gpu.nodes if gpu is not None else ():
        args += ["--dev-bind", host, inside_path]  # one node each, never the host's /dev
    args += ["--chdir", SANDBOX_TMP]
    # The root and /dev tmpfs bwrap builds stay read-only: /tmp is the one writable place.
    args += ["--remount-ro", "/", "--remount-ro", "/dev"]
    args += ["--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", SANDBOX_TMP]
    args += ["--setenv", "LANG", "C.UTF-8", "--setenv", "OMP_NUM_THREADS", "1"]
    env = gpu.env() if gpu is not None else {"TRITON_INTERPRET": "1"}
    for name, value in env.items():
        args += ["--setenv", name, value]
    args += ["--seccomp", str(seccomp_fd)]
    args += ["--", exe, "-E", "-s", "-S", "-B", f"{RUNNER_DIR}/runner.py"]
    args += [str(control_fd), *inside]
    return args
