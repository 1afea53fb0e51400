"""Registered lab exercises, the quantization library (labs.quant) and the
sandboxed runtime that executes labs (labs.runtime)."""
