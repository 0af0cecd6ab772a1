"""The CPU side of the seeds: a numba GEMM ladder (seed 004's loops, seed 001's multithreaded
reference), checked and benchmarked with the same commands as the GPU kernels."""
