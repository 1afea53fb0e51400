"""The one ``nvidia-smi --query-gpu`` reader: a fixed argv (no shell), one timeout.

It never initialises CUDA. Callers get the whole reply (exit code, stdout, stderr, or
why there was none) and decide what a failure means to them.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

NVIDIA_SMI = "nvidia-smi"
# Seconds nvidia-smi may take to answer. A healthy driver answers in well under a second;
# a wedged one (a GPU fallen off the bus) can hang for much longer.
NVIDIA_SMI_TIMEOUT_S = 10.0


def argv(fields: tuple[str, ...], device: str | None = None) -> list[str]:
    """The command line that queries ``fields``, for one device (index or UUID) or all."""
    cmd = [NVIDIA_SMI, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if device is not None:
        cmd.append(f"--id={device}")
    return cmd


@dataclass(frozen=True)
class SmiReply:
    """What one nvidia-smi call gave back."""

    argv: list[str]
    returncode: int | None  # None: it did not run to the end (not installed, timed out, OSError)
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # why there is no exit code
    installed: bool = True

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def rows(self) -> list[list[str]]:
        """The cells of each non-empty stdout line, stripped (``csv,noheader`` output)."""
        return [
            [c.strip() for c in line.split(",")]
            for line in self.stdout.strip().splitlines()
            if line.strip()
        ]


def installed() -> bool:
    """Whether nvidia-smi is on this process's PATH."""
    return shutil.which(NVIDIA_SMI) is not None


def query(fields: tuple[str, ...], device: str | None = None) -> SmiReply:
    """Run nvidia-smi for ``fields`` (one device or all) within ``NVIDIA_SMI_TIMEOUT_S``."""
    cmd = argv(fields, device)
    if not installed():
        return SmiReply(cmd, None, error=f"{NVIDIA_SMI} is not on this PATH", installed=False)
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return SmiReply(
            cmd, None, error=f"{NVIDIA_SMI} did not answer within {NVIDIA_SMI_TIMEOUT_S:g} s"
        )
    except OSError as exc:
        return SmiReply(cmd, None, error=f"{NVIDIA_SMI} failed: {exc}")
    return SmiReply(cmd, proc.returncode, proc.stdout or "", proc.stderr or "")


def query_dicts(fields: tuple[str, ...]) -> list[dict[str, str]] | None:
    """One ``{field: cell}`` dict per GPU, or None without a working NVIDIA driver."""
    reply = query(fields)
    if not reply.ok:
        return None
    return [dict(zip(fields, r, strict=False)) for r in reply.rows()] or None
