"""The lab's benchmark: timing against cuBLAS in the same process, JSON records, reports."""
