# expect: 2·m·n·k
def roofline_seconds(m, n, k, bytes_per_value, gpu):
    compute = m * n * k / (gpu["peak_tflops"] * 1e12)
    memory = (m * k + k * n + m * n) * bytes_per_value / (gpu["bandwidth_tb_s"] * 1e12)
    return max(compute, memory)
