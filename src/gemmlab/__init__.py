"""gemmlab: hand-written CUDA GEMM kernels, compiled at run time, verified against float64
and benchmarked against cuBLAS."""

from .api import kernels, select
from .ops import gemm
from . import nn
from .nn import linear
from .conv import conv2d
from .batched import bmm, matmul
from .jit import CompileError
from .problem import GemmProblem
from .specs.base import GemmConfig, KernelSpec

__all__ = ["gemm", "bmm", "matmul", "linear", "conv2d", "nn", "kernels", "select", "CompileError", "GemmProblem", "GemmConfig", "KernelSpec"]
__version__ = "0.1.0"
