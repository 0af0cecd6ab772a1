"""Launching: device, stream and argument plumbing between torch and the CUDA driver
(cuda.bindings). The launcher only launches; what to launch (kernel, config, geometry) is decided
before it is called. Nothing here imports cuda.core, whose import (about 0.12 s on the H200 host)
would otherwise be the largest part of a process's first call with its kernel already compiled
(docs/notes/cold-start.md); cuda.core compiles (gemmlab.jit) and nothing else."""

from __future__ import annotations

import ctypes
import math
import struct
import threading
from functools import lru_cache

import numpy as np

from .device import sm_count

STATIC_SMEM_LIMIT = 48 * 1024

_tls = threading.local()


def _check(driver, err, what: str) -> None:
    if err != driver.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: {err}")


def ensure_current(device_id: int) -> None:
    """Make the device's primary context (the one torch uses) current on this thread, once per thread."""
    done = getattr(_tls, "devices", None)
    if done is None:
        done = _tls.devices = set()
    if device_id not in done:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        _check(driver, err, "cuInit")
        err, ctx = driver.cuDevicePrimaryCtxRetain(driver.CUdevice(device_id))
        _check(driver, err, f"retaining device {device_id}'s primary context")
        (err,) = driver.cuCtxSetCurrent(ctx)
        _check(driver, err, f"making device {device_id}'s primary context current")
        done.add(device_id)


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


class _ClusterDim(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class _LaunchAttributeValue(ctypes.Union):
    _fields_ = [("clusterDim", _ClusterDim), ("pad", ctypes.c_char * 64)]


class LaunchAttribute(ctypes.Structure):
    """The driver's CUlaunchAttribute (cuda.h): an id, padding to 8 bytes, a 64-byte value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """The driver's CUlaunchConfig (cuda.h), as cuLaunchKernelEx takes it."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttribute)), ("numAttrs", ctypes.c_uint)]  # fmt: skip


CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (tests/test_launch.py checks it against cuda.bindings)


def new_launch_config(grid: tuple, block: tuple, smem: int, cluster: tuple | None = None) -> LaunchConfig:
    """The driver's launch configuration (cuLaunchKernelEx's): grid counts blocks, as the driver's
    does, in whole clusters of the cluster shape where one is given (a grid that is not whole
    clusters is refused here rather than by the launch). Its stream is set at each launch."""
    if cluster is None:
        return LaunchConfig(*grid, *block, smem, None, None, 0)
    if any(g % c for g, c in zip(grid, cluster)):
        raise ValueError(f"a grid of {grid} blocks is not whole clusters of {cluster}")
    attrs = (LaunchAttribute * 1)()
    attrs[0].id = CLUSTER_DIMENSION
    attrs[0].value.clusterDim.x, attrs[0].value.clusterDim.y, attrs[0].value.clusterDim.z = cluster
    return LaunchConfig(*grid, *block, smem, None, attrs, 1)  # (the config keeps attrs alive)


launch_config = lru_cache(maxsize=4096)(new_launch_config)  # shared by launch()'s calls, under _CONFIG_LOCK


@lru_cache(maxsize=None)
def max_dynamic_smem(device_id: int) -> int:
    import torch

    props = torch.cuda.get_device_properties(device_id)
    return int(getattr(props, "shared_memory_per_block_optin", STATIC_SMEM_LIMIT))


class DriverKernel:
    """One kernel of a cubin loaded through the driver (cuLibraryLoadData: a library no context
    owns, loaded into a context when first used there), and its CUfunction in each device's
    primary context, found once."""

    __slots__ = ("library", "handle", "name", "_functions")

    def __init__(self, cubin: bytes, lowered_name: str, name: str):
        from cuda.bindings import driver

        err, self.library = driver.cuLibraryLoadData(cubin, [], [], 0, [], [], 0)
        _check(driver, err, f"loading {name}'s cubin")
        err, self.handle = driver.cuLibraryGetKernel(self.library, lowered_name.encode())
        _check(driver, err, f"finding {lowered_name} in {name}'s cubin")
        self.name, self._functions = name, {}

    def function(self, device_id: int):
        """The kernel as a CUfunction of the device's primary context (made current on this thread)."""
        func = self._functions.get(device_id)
        if func is None:
            from cuda.bindings import driver

            ensure_current(device_id)
            err, func = driver.cuKernelGetFunction(self.handle)
            _check(driver, err, f"cuKernelGetFunction for {self.name}")
            self._functions[device_id] = func
        return func

    def attribute(self, name: str, device_id: int) -> int:
        """A CU_FUNC_ATTRIBUTE_<name> of the kernel on the device (NUM_REGS, LOCAL_SIZE_BYTES, ...)."""
        from cuda.bindings import driver

        attr = getattr(driver.CUfunction_attribute, f"CU_FUNC_ATTRIBUTE_{name}")
        err, value = driver.cuKernelGetAttribute(attr, self.handle, driver.CUdevice(device_id))
        _check(driver, err, f"reading {name} of {self.name}")
        return int(value)


def function_handle(loaded, device_id: int):
    """The kernel as a CUfunction of the device's primary context."""
    return loaded.kernel.function(device_id)


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
    """Allow a kernel more than 48 KB of dynamic shared memory."""
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

# How an argument reaches a kernel parameter: numpy scalars as their own C type, Python ints as
# signed 64-bit integers (addresses, as intptr_t; a 32-bit parameter reads their low half), floats
# as doubles, ctypes values (the tensor maps' 128 bytes among them) as they are.
_CTYPES = {int: ctypes.c_int64, float: ctypes.c_double, bool: ctypes.c_bool, np.int32: ctypes.c_int32,
           np.int64: ctypes.c_int64, np.uint32: ctypes.c_uint32, np.uint64: ctypes.c_uint64, np.float32: ctypes.c_float,
           np.float64: ctypes.c_double, np.int16: ctypes.c_int16, np.uint16: ctypes.c_uint16, np.int8: ctypes.c_int8,
           np.uint8: ctypes.c_uint8, np.bool_: ctypes.c_bool}  # fmt: skip


def as_ctype(arg):
    """A kernel argument as the ctypes value whose bytes the kernel's parameter gets."""
    kind = _CTYPES.get(type(arg))
    if kind is not None:
        return kind(arg)
    if isinstance(arg, (ctypes._SimpleCData, ctypes.Array, ctypes.Structure)):
        return arg
    raise TypeError(f"a kernel argument of type {type(arg).__name__} ({arg!r}) has no C type here")


def addresses(values) -> ctypes.Array:
    """The addresses of ctypes values, as a launch's kernelParams array."""
    return (ctypes.c_void_p * len(values))(*map(ctypes.addressof, values))


def packed_args(args: tuple) -> tuple[list, ctypes.Array]:
    """The arguments as ctypes values and the array of their addresses cuLaunchKernel takes (keep
    the values alive until the launch has returned: the driver copies them then)."""
    values = [as_ctype(a) for a in args]
    return values, addresses(values)


_FORMATS = {t: ctypes_type._type_ for t, ctypes_type in _CTYPES.items()}  # struct's letter of each C type
_PACKERS = threading.local()  # a thread's packers, by the argument types of a call


def _packer(types: tuple):
    """A packer of arguments of these types: a struct laid out as C lays out its fields, a buffer
    this thread reuses, and the addresses of its fields in the buffer (cuLaunchKernel's array)."""
    fields = [_FORMATS.get(t) or f"{ctypes.sizeof(t)}s" for t in types]  # (ctypes values: their bytes)
    layout = struct.Struct("@" + "".join(fields))
    buffer = ctypes.create_string_buffer(max(1, layout.size))
    base = ctypes.addressof(buffer)
    offsets = [struct.calcsize("@" + "".join(fields[: i + 1])) - struct.calcsize("@" + f) for i, f in enumerate(fields)]
    params = (ctypes.c_void_p * len(types))(*(base + o for o in offsets))
    as_bytes = tuple(i for i, t in enumerate(types) if t not in _FORMATS)
    return layout, buffer, params, as_bytes


def packed_once(args: tuple) -> ctypes.Array:
    """Pack the arguments into this thread's buffer for their types and return the array of their
    addresses there, valid until the thread's next call with the same types (a launch copies them).
    One struct.pack_into a call: about a fifth of the time packed_args takes."""
    packers = getattr(_PACKERS, "by_types", None)
    if packers is None:
        packers = _PACKERS.by_types = {}
    types = tuple(map(type, args))
    packer = packers.get(types)
    if packer is None:
        for arg in args:
            as_ctype(arg)  # (raises the TypeError of an argument with no C type)
        packer = packers[types] = _packer(types)
    layout, buffer, params, as_bytes = packer
    if as_bytes:
        args = list(args)
        for i in as_bytes:
            args[i] = bytes(args[i])
    layout.pack_into(buffer, 0, *args)
    return params


_CONFIG_LOCK = threading.Lock()  # over the shared launch_config objects, whose stream each launch sets
_LAUNCH = None  # the driver's cuLaunchKernelEx, through ctypes


def _launch_function():
    """The driver's cuLaunchKernelEx, called through ctypes: cuda.bindings' wrappers make Python
    objects of a launch's arguments and result, and took more host time a call than a 64^3 kernel
    runs on an H200 (docs/notes/host-time-a-call.md). Every launch takes it (cuLaunchKernel's eleven
    arguments cost ctypes about three times the conversion of its four). libcuda.so.1 is the
    library torch and cuda.bindings have loaded already."""
    global _LAUNCH
    if _LAUNCH is None:
        function = ctypes.CDLL("libcuda.so.1").cuLaunchKernelEx
        function.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        function.restype = ctypes.c_int
        _LAUNCH = function
    return _LAUNCH


def launch_packed(config: LaunchConfig, func: int, stream: int, params: ctypes.Array, name: str) -> None:
    """cuLaunchKernelEx of the CUfunction at address func on the stream of raw handle stream (set
    into config, which the caller holds alone until this returns), with packed arguments."""
    config.hStream = stream
    err = (_LAUNCH or _launch_function())(config, func, params, None)
    if err:
        from cuda.bindings import driver

        cluster = (config.attrs[0].value.clusterDim.x,) if config.numAttrs else None
        raise RuntimeError(f"launching {name} (grid {config.gridDimX, config.gridDimY, config.gridDimZ}, block "
                           f"{config.blockDimX, config.blockDimY, config.blockDimZ}, clusters of {cluster}, "
                           f"{config.sharedMemBytes} B shared) failed: {driver.CUresult(err)!r}")  # fmt: skip


def launch(loaded, device_id: int, grid: tuple, block: tuple, *args, cluster: tuple | None = None) -> None:
    """Launch a loaded kernel on torch's current stream of the device."""
    ensure_current(device_id)
    config = launch_config(grid, block, loaded.compiled.usage.dynamic_smem, cluster)
    func, stream, params = int(function_handle(loaded, device_id)), current_stream_handle(device_id), packed_once(args)
    with _CONFIG_LOCK:
        launch_packed(config, func, stream, params, loaded.spec.id)


class Launcher:
    """One kernel's launch with its geometry fixed (grid, block, shared memory, cluster), for a plan
    that launches it again and again with arguments of the same types in the same places: the
    CUfunction is found and the arguments' ctypes values made once, so a call writes only the
    arguments that are not the very objects of the last call (a plan's constant sizes and scalars
    are) into them and launches on torch's current stream. A call with an argument of another type
    than the last call's there makes them all again."""

    __slots__ = ("func", "name", "device_id", "config", "_last", "_types", "_values", "_params", "_lock")

    def __init__(self, loaded, device_id: int, grid: tuple, block: tuple, cluster: tuple | None = None):
        self.func, self.name, self.device_id = int(function_handle(loaded, device_id)), loaded.spec.id, device_id
        self.config = new_launch_config(grid, block, loaded.compiled.usage.dynamic_smem, cluster)  # (its own)
        self._last, self._types, self._values, self._params = (), (), [], None
        self._lock = threading.Lock()

    def _write(self, args: tuple) -> None:
        """Bring the ctypes values (and their addresses) to these arguments."""
        last, types, values = self._last, self._types, self._values
        if len(args) == len(last):
            for i, arg in enumerate(args):
                if arg is last[i]:
                    continue
                kind = type(arg)
                if kind is not types[i]:
                    break
                if kind in _CTYPES:
                    values[i].value = arg
                else:  # the caller's own ctypes value (a map): by address
                    values[i] = as_ctype(arg)
                    self._params[i] = ctypes.addressof(values[i])
            else:
                self._last = args
                return
        self._values, self._params = packed_args(args)
        self._types, self._last = tuple(map(type, args)), args

    def __call__(self, *args) -> None:
        """Launch on torch's current stream of the device with these arguments."""
        ensure_current(self.device_id)
        stream = current_stream_handle(self.device_id)
        with self._lock:  # (the values are shared until the driver has copied them)
            self._write(args)
            launch_packed(self.config, self.func, stream, self._params, self.name)


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
