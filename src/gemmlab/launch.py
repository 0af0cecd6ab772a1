"""Launching: device and stream plumbing between torch and cuda.core. The launcher only launches;
what to launch (kernel, config, geometry) is decided before it is called."""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np

from .device import sm_count

STATIC_SMEM_LIMIT = 48 * 1024

_tls = threading.local()


def ensure_current(device_id: int) -> None:
    """Make the device's primary context (the one torch uses) current for cuda.core, once per thread."""
    done = getattr(_tls, "devices", None)
    if done is None:
        done = _tls.devices = set()
    if device_id not in done:
        from cuda.core import Device

        Device(device_id).set_current()
        done.add(device_id)


@lru_cache(maxsize=64)
def _stream(handle: int):
    from cuda.core import Stream

    return Stream.from_handle(handle)


def _raw_stream_getter():
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # an int, without a Stream object
    if raw is not None:
        return raw
    return lambda device_id: torch.cuda.current_stream(device_id).cuda_stream


_current_raw_stream = None


def current_stream_handle(device_id: int) -> int:
    """torch's current stream on the device, as its raw handle (an int)."""
    global _current_raw_stream
    if _current_raw_stream is None:
        _current_raw_stream = _raw_stream_getter()
    return _current_raw_stream(device_id)


def torch_stream(device_id: int):
    """torch's current stream on the device, as a cuda.core Stream."""
    return _stream(current_stream_handle(device_id))


@lru_cache(maxsize=4096)
def launch_config(grid: tuple, block: tuple, smem: int, cluster: tuple | None = None):
    """grid counts blocks, always. cuda.core's LaunchConfig counts clusters when a cluster shape is
    given (so grid=132, cluster=2 launches 264 blocks): the grid is converted here. Until this was
    found (2026-11-22), every clustered launch ran twice the blocks planned -- correct, as the
    kernels split work by gridDim, but half the persistent blocks waited for an SM."""
    from cuda.core import LaunchConfig

    if cluster is None:
        return LaunchConfig(grid=grid, block=block, shmem_size=smem)
    if any(g % c for g, c in zip(grid, cluster)):
        raise ValueError(f"a grid of {grid} blocks is not whole clusters of {cluster}")
    clusters = tuple(g // c for g, c in zip(grid, cluster))
    return LaunchConfig(grid=clusters, block=block, shmem_size=smem, cluster=cluster)


@lru_cache(maxsize=None)
def max_dynamic_smem(device_id: int) -> int:
    import torch

    props = torch.cuda.get_device_properties(device_id)
    return int(getattr(props, "shared_memory_per_block_optin", STATIC_SMEM_LIMIT))


def function_handle(loaded, device_id: int):
    """The kernel as a CUfunction of the current context (cuda.core may hold a context-less CUkernel)."""
    from cuda.bindings import driver

    handle = loaded.kernel.handle
    if isinstance(handle, driver.CUkernel):
        err, func = driver.cuKernelGetFunction(handle)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"cuKernelGetFunction failed for {loaded.spec.id}: {err}")
        return func
    return handle


_CLUSTERS: dict[tuple, int] = {}


def resident_blocks(loaded, device_id: int, block: tuple, cluster: tuple | None) -> int:
    """How many blocks of this kernel can be resident at once on the device, in whole clusters:
    the grid of a persistent kernel. Clusters live inside one GPC, and a GPC whose free SMs do not
    divide into whole clusters leaves some idle, so this asks the driver rather than dividing the
    SM count (a grid larger than this would run a second, mostly empty wave)."""
    per_cluster = math.prod(cluster) if cluster else 1
    key = (loaded.spec.id, loaded.config, loaded.compiled.name_expression, device_id, block, cluster)
    if key in _CLUSTERS:
        return _CLUSTERS[key]
    from cuda.bindings import driver

    ensure_current(device_id)
    raise_dynamic_smem(loaded, device_id)
    if not cluster:
        # The cluster query needs a cluster size (without one the driver answers
        # CUDA_ERROR_INVALID_CLUSTER_SIZE): a kernel launched without clusters asks per SM.
        err, per_sm = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            function_handle(loaded, device_id), math.prod(block), loaded.compiled.usage.dynamic_smem)
        if err != driver.CUresult.CUDA_SUCCESS or per_sm < 1:
            raise RuntimeError(f"cannot place a block of {loaded.spec.id} {loaded.config.as_dict()} on device {device_id}: {err}")
        _CLUSTERS[key] = sm_count(device_id)  # one block an SM, as below
        return _CLUSTERS[key]
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = sm_count(device_id) // per_cluster * per_cluster, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = loaded.compiled.usage.dynamic_smem
    attrs = []
    if cluster:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    cfg.attrs, cfg.numAttrs = attrs, len(attrs)
    err, clusters = driver.cuOccupancyMaxActiveClusters(function_handle(loaded, device_id), cfg)
    if err != driver.CUresult.CUDA_SUCCESS or clusters < 1:
        raise RuntimeError(f"cannot place a cluster of {loaded.spec.id} {loaded.config.as_dict()} on device {device_id}: {err}")
    # Never more than one block an SM (these kernels' shared memory allows no more): the stream-K
    # kernel's blocks wait on each other, so every block it launches must be resident at once.
    _CLUSTERS[key] = min(clusters * per_cluster, sm_count(device_id) // per_cluster * per_cluster)
    return _CLUSTERS[key]


def resident_blocks_all(loaded, device_id: int, block: tuple) -> int:
    """How many blocks of this kernel (no clusters) the device holds at once, every SM as many as
    its registers and shared memory allow (the driver's occupancy): the grid of a persistent
    kernel whose blocks never wait on each other, so that several share an SM (conv04's)."""
    key = (loaded.spec.id, loaded.config, loaded.compiled.name_expression, device_id, block, "all")
    if key in _CLUSTERS:
        return _CLUSTERS[key]
    from cuda.bindings import driver

    ensure_current(device_id)
    raise_dynamic_smem(loaded, device_id)
    err, per_sm = driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        function_handle(loaded, device_id), math.prod(block), loaded.compiled.usage.dynamic_smem)
    if err != driver.CUresult.CUDA_SUCCESS or per_sm < 1:
        raise RuntimeError(f"cannot place a block of {loaded.spec.id} {loaded.config.as_dict()} on device {device_id}: {err}")
    _CLUSTERS[key] = per_sm * sm_count(device_id)
    return _CLUSTERS[key]



def raise_dynamic_smem(loaded, device_id: int) -> None:
    """Allow a kernel more than 48 KB of dynamic shared memory (cuda.core has no setter)."""
    need = loaded.compiled.usage.dynamic_smem
    if need <= STATIC_SMEM_LIMIT - max(loaded.compiled.usage.static_smem, 0):
        return
    limit = max_dynamic_smem(device_id)
    if need + max(loaded.compiled.usage.static_smem, 0) > limit:
        raise ValueError(
            f"{loaded.spec.id} {loaded.config.as_dict()} needs {need} B of dynamic shared memory "
            f"(+{loaded.compiled.usage.static_smem} static); device {device_id} allows {limit} B a block"
        )
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = loaded.kernel.handle
    if isinstance(handle, driver.CUkernel):
        (err,) = driver.cuKernelSetAttribute(attr, need, handle, driver.CUdevice(device_id))
    else:
        (err,) = driver.cuFuncSetAttribute(handle, attr, need)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"could not raise dynamic shared memory of {loaded.spec.id} to {need} B: {err}")



_DRIVER_STREAMS: dict[int, object] = {}  # a raw stream handle -> the driver's CUstream of it


def driver_stream(device_id: int):
    """torch's current stream on the device as the driver's CUstream, for launches through
    cuLaunchKernel with arguments a plan keeps (conv03's and conv04's)."""
    handle = current_stream_handle(device_id)
    stream = _DRIVER_STREAMS.get(handle)
    if stream is None:
        from cuda.bindings import driver

        stream = _DRIVER_STREAMS[handle] = driver.CUstream(handle)
    return stream

def launch(loaded, device_id: int, grid: tuple, block: tuple, *args, cluster: tuple | None = None) -> None:
    """Launch a loaded kernel on torch's current stream of the device."""
    from cuda.core import launch as cc_launch

    ensure_current(device_id)
    cfg = launch_config(grid, block, loaded.compiled.usage.dynamic_smem, cluster)
    cc_launch(torch_stream(device_id), cfg, loaded.kernel, *args)


class Launcher:
    """One kernel's launch with its geometry fixed (grid, block, shared memory, cluster), for a plan
    that launches it again and again: the launch configuration and cuda.core's launch function are
    found once, so a call only looks up torch's current stream and hands over the arguments."""

    __slots__ = ("kernel", "config", "device_id", "_launch")

    def __init__(self, loaded, device_id: int, grid: tuple, block: tuple, cluster: tuple | None = None):
        from cuda.core import launch as cc_launch

        self.kernel, self.device_id, self._launch = loaded.kernel, device_id, cc_launch
        self.config = launch_config(grid, block, loaded.compiled.usage.dynamic_smem, cluster)

    def __call__(self, *args) -> None:
        """Launch on torch's current stream of the device with these arguments."""
        ensure_current(self.device_id)
        self._launch(torch_stream(self.device_id), self.config, self.kernel, *args)


i32 = np.int32
i64 = np.int64
f32 = np.float32


class _DriverMemory:
    """A block of device memory from the driver (cuMemAlloc), seen by torch through the CUDA array
    interface. Never freed (see held_tensor)."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False), "version": 3}


_HELD: list = []  # every block held_tensor handed out, kept for the process's life


def held_tensor(shape: tuple[int, ...], dtype, device_id: int):
    """A zeroed tensor on memory from the driver, outside torch's caching allocator and any of its
    pools, for what gemmlab keeps between calls (workspaces, placeholders). Memory torch allocates
    while torch.compile's mode="reduce-overhead" warms up or records a CUDA graph comes from the
    graph's pool, and the graph is refused if the pool still holds memory its outputs do not account
    for after the call. Never freed: a workspace that is replaced stays allocated (each replacement
    at least doubles, so the retired ones hold less than the live one). Not while the current
    stream is capturing a graph (cuMemAlloc is not a captured call): there, allocate per call."""
    import torch
    from cuda.bindings import driver

    ensure_current(device_id)
    numel = math.prod(shape)
    view_dtype = {torch.bfloat16: torch.int16}.get(dtype, dtype)  # (no bfloat16 typestr: viewed after)
    err, ptr = driver.cuMemAlloc(max(1, numel) * view_dtype.itemsize)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise MemoryError(f"cuMemAlloc of {numel} x {dtype} on device {device_id}: {err}")
    _HELD.append(ptr)
    typestr = {torch.float32: "<f4", torch.int32: "<i4", torch.float16: "<f2", torch.int16: "<i2"}[view_dtype]
    t = torch.as_tensor(_DriverMemory(int(ptr), tuple(shape), typestr), device=f"cuda:{device_id}")
    return t.zero_().view(dtype)
