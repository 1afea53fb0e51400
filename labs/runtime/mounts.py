"""The lab child's view of the file system, set up in its own mount namespace:
hidden paths (the data directory, the host's unix sockets), a private tmpfs on
``/tmp``, directories the sandbox user cannot traverse covered except for the
interpreter, and every other mount read-only. Called by ``sandbox.enter``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys

from labs.runtime.limits import MIB, Protections, SandboxConfig

# <linux/mount.h>
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

LIBC = ctypes.CDLL(None, use_errno=True)


def check(rc: int, what: str) -> None:
    """Raise ``OSError`` with errno's message unless a libc call returned 0."""
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    rc = LIBC.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    check(rc, f"mount {target}")


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


def filesystem(
    cfg: SandboxConfig, p: Protections, ids: tuple[int, int] | None, sockets: list[str]
) -> str:
    """Hide paths, cover /tmp and closed directories, expose the interpreter again,
    make every mount read-only. Returns the lab's temp dir."""
    uid, gid = ids or (os.getuid(), os.getgid())
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates to the host
    hidden, failed = [], []
    for path in cfg.hide:
        try:
            if os.path.isdir(path):
                mount(
                    "tmpfs",
                    path,
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "size=4k,mode=0000",
                )
            elif os.path.exists(path):
                mount("/dev/null", path, None, MS_BIND)
            else:
                continue
            hidden.append(path)
        except OSError as e:
            failed.append(f"{path} ({e.strerror})")
    masked = 0
    # A socket inside a hidden directory (the data dir's bells) is hidden with it.
    covered_dirs = [h.rstrip("/") + "/" for h in hidden if os.path.isdir(h)]
    for path in sockets:
        if any(path.startswith(d) for d in covered_dirs):
            masked += 1
            continue
        try:
            mount("/dev/null", path, None, MS_BIND)
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
    mount(
        "tmpfs",
        TMP,
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={cfg.tmp_bytes},mode=0700,uid={uid},gid={gid}",
    )
    for d in closed:
        mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
    for n, fd in handles.items():
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(n, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(n), exist_ok=True)
            open(n, "a").close()
        mount(f"/proc/self/fd/{fd}", n, None, MS_BIND | MS_REC)
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
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
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
