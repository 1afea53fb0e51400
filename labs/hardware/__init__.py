"""What this machine's hardware reports: one reader per source.

- :mod:`labs.hardware.nvidia_smi` runs ``nvidia-smi --query-gpu`` (every caller shares
  its argv and its timeout);
- :mod:`labs.hardware.nvml` asks NVML through pynvml, where it is installed;
- :mod:`labs.hardware.host_memory` reads this process's resident memory from /proc.

None of them imports torch or initialises CUDA, so the worker's parent and the web
process may call them.
"""
