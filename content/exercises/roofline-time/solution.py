TERA = 1e12  # datasheet TFLOP/s and TB/s are decimal


def roofline_seconds(m: int, n: int, k: int, bytes_per_value: float, gpu: dict) -> float:
    """Lower bound on the time of C[m×n] = A[m×k] · B[k×n] on gpu (peak_tflops, bandwidth_tb_s)."""
    flops = 2 * m * n * k
    bytes_moved = (m * k + k * n + m * n) * bytes_per_value
    compute = flops / (gpu["peak_tflops"] * TERA)
    memory = bytes_moved / (gpu["bandwidth_tb_s"] * TERA)
    return max(compute, memory)
