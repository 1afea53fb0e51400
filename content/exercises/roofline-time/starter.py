def roofline_seconds(m: int, n: int, k: int, bytes_per_value: float, gpu: dict) -> float:
    """Lower bound on the time of C[m×n] = A[m×k] · B[k×n] on gpu (peak_tflops, bandwidth_tb_s)."""
    # flops = ...; bytes_moved = ...
    # compute time and memory time: which one bounds?
    raise NotImplementedError
