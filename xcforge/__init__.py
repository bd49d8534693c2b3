"""xcforge: one matrix, four kinds of hardware, signed vLLM images."""

__version__ = "0.1.0"
