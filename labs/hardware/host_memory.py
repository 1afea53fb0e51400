"""This process's host memory, from /proc (Linux). Units: bytes."""

from __future__ import annotations

KIB = 2**10
PROC_STATUS = "/proc/self/status"
# /proc/self/clear_refs: writing "5" resets the peak RSS (VmHWM), Linux >= 4.0.
CLEAR_REFS = "/proc/self/clear_refs"
RESET_PEAK_RSS = "5"


def status_bytes(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status (VmRSS, VmHWM) in bytes; None off Linux."""
    try:
        with open(PROC_STATUS, encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * KIB
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    """Resident set size now, bytes."""
    return status_bytes("VmRSS")


def peak_rss_bytes() -> int | None:
    """Peak resident set size since the process started or since ``reset_peak_rss()``."""
    return status_bytes("VmHWM")


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window; False where the kernel does not allow it."""
    try:
        with open(CLEAR_REFS, "w", encoding="ascii") as f:
            f.write(RESET_PEAK_RSS)
        return True
    except OSError:
        return False


def trim_heap() -> None:
    """Hand freed heap memory back to the OS (glibc malloc_trim), so RSS before a
    measurement is not inflated by blocks a previous one freed. Best effort."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return
