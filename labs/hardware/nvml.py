"""NVML through pynvml (``nvidia-ml-py``), where it is installed. Never initialises CUDA."""

from __future__ import annotations


def utilization_and_used(uuid: str | None) -> tuple[float, int] | None:
    """(GPU utilization in %, memory.used in bytes) of the device with ``uuid`` (the first
    device when None), or None when pynvml is missing, there is no driver, or NVML refuses
    the device (an unknown UUID, a MIG device)."""
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
    except Exception:  # not installed, or no driver: the caller falls back
        return None
    try:
        h = pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(0)
        return (
            float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu),
            int(pynvml.nvmlDeviceGetMemoryInfo(h).used),
        )
    except Exception:  # any NVML error for this device: the caller falls back
        return None
    finally:
        pynvml.nvmlShutdown()
