"""Run-time compilation: CUDA C++ under gemmlab/kernels/ -> cubin (NVRTC via cuda.core) -> a kernel
loaded through the driver (launch.DriverKernel).

* Cubins are cached on disk under GEMMLAB_CACHE_DIR (default: the user's cache directory),
  keyed on the full source text with every header it includes, the compile options, the arch,
  the template arguments and the NVRTC version. Entries are written to a temporary file and
  renamed into place, so concurrent compilers never leave a torn file; an entry that cannot be
  read is compiled again.
* Every compile runs ptxas in verbose mode, so the resource report (registers, shared memory,
  stack frame, spills) is known without a GPU; with a GPU the loaded kernel's attributes say
  the same from the driver.
* Loaded kernels are cached per process.
* Each CompiledKernel says how long its phases took in this process (timings): what a first call
  waits for (docs/notes/cold-start.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cache, lru_cache
import hashlib
import io
import json
import os
from pathlib import Path
import re
import struct
import tempfile
import threading
import time
import warnings
from importlib import metadata, resources

from . import launch
from .specs.base import GemmConfig, KernelSpec
from .userdirs import user_cache_dir

CACHE_FORMAT = b"GEMMLAB1"

# NVRTC keeps its own cache of compiled programs (the CUDA compute cache); a program it has seen
# before comes back without running ptxas, so without ptxas's -v report: on an H100 machine a
# second compile of one kernel in a process returned an empty log, and the resource report read
# -1 (the cause of "no ptxas resource report", cuda-python issue 1124). gemmlab caches cubins
# itself (cache_dir), so NVRTC's cache is turned off for the process. The variable is read once,
# by NVRTC's or CUDA's first use in the process: set here it is in time when gemmlab compiles before
# anything initialises CUDA; the test suite (tests/conftest.py) and scripts/gpu_run.sh set it before
# torch does, and a process that initialised CUDA first may still get the -1 report below
# (measured on an H100 machine: set after torch.cuda.is_available(), 0 bytes of log on a second
# compile; set before, the report every time). CUDA_CACHE_DISABLE=0 in the environment keeps it on.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


class CompileError(RuntimeError):
    """NVRTC rejected a kernel; .kernel names it and .log holds NVRTC's output."""

    def __init__(self, kernel: str, log: str):
        super().__init__(f"NVRTC failed to compile {kernel}:\n{log.strip()}")
        self.kernel = kernel
        self.log = log


@dataclass(frozen=True)
class ResourceUsage:
    registers: int
    static_smem: int  # bytes, declared __shared__
    dynamic_smem: int  # bytes, requested at launch by this config
    stack_frame: int  # bytes of local memory per thread
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    source: str  # "ptxas" (compile-time report) or "driver" (loaded kernel attributes)

    @property
    def spills(self) -> int:
        return self.spill_stores + self.spill_loads


@dataclass(frozen=True)
class CompiledKernel:
    kernel_id: str
    name_expression: str
    lowered_name: str
    arch: str
    cubin: bytes
    usage: ResourceUsage
    log: str
    from_cache: bool
    # seconds each phase took in this process: ("cache lookup", s) (the key, and reading the entry
    # where there is one), then for a compile ("nvrtc", s), ("launch registers", s) where the count
    # is rewritten, and ("cache write", s)
    timings: tuple[tuple[str, float], ...] = field(default=(), compare=False)


def kernels_dir() -> Path:
    return Path(str(resources.files("gemmlab") / "kernels"))


def cache_dir() -> Path:
    env = os.environ.get("GEMMLAB_CACHE_DIR")
    if env:
        return Path(env)
    return user_cache_dir()


@cache
def nvrtc_version() -> str:
    """The NVRTC in use: 'major.minor', plus the wheel's full version if any (read once a process:
    it is part of every cache key). Where the nvidia-cuda-nvrtc wheel is installed and no other
    NVRTC is loaded in the process, the wheel's library is the one cuda.bindings loads (cuda.pathfinder
    looks in site-packages first), and its version says major.minor without loading the library
    -- which, with cuda.pathfinder's import, was most of a warm cache lookup."""
    try:
        wheel = metadata.version("nvidia-cuda-nvrtc")
    except metadata.PackageNotFoundError:
        wheel = None
    if wheel is not None and _only_wheel_nvrtc_loaded():
        major, minor = wheel.split(".")[:2]
        return f"{major}.{minor} (nvidia-cuda-nvrtc {wheel})"
    return library_nvrtc_version()


def library_nvrtc_version() -> str:
    """nvrtc_version as the loaded library says it (loading it: cuda.bindings finds it through
    cuda.pathfinder)."""
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    version = f"{major}.{minor}"
    try:
        version += f" (nvidia-cuda-nvrtc {metadata.version('nvidia-cuda-nvrtc')})"
    except metadata.PackageNotFoundError:
        pass
    return version


def _only_wheel_nvrtc_loaded() -> bool:
    """Whether every libnvrtc mapped into this process (if any) is the nvidia wheel's; False where
    the process's mappings cannot be read (not Linux)."""
    try:
        import nvidia

        wheel_dirs = tuple(str(Path(d).resolve()) for d in nvidia.__path__)
        with open("/proc/self/maps") as f:
            mapped = {line.split(maxsplit=5)[-1].strip() for line in f if "libnvrtc" in line}
    except (ImportError, OSError):
        return False
    return all(str(Path(m).resolve()).startswith(wheel_dirs) for m in mapped)


def source_closure(path: Path, root: Path | None = None) -> dict[str, str]:
    """The text of a source file and of every local header it includes, by path under root."""
    root = root or kernels_dir()
    found: dict[str, str] = {}

    def visit(p: Path) -> None:
        key = p.resolve().relative_to(root.resolve()).as_posix()
        if key in found:
            return
        text = p.read_text()
        found[key] = text
        for inc in _INCLUDE_RE.findall(text):
            for base in (p.parent, root):
                if (base / inc).is_file():
                    visit(base / inc)
                    break

    visit(path)
    return found


def cuda_include_dir() -> str | None:
    """CUDA's own headers (cuda_bf16.h, mma.h and the crt/ headers mma.h includes), which NVRTC
    13.0 does not bundle: from the nvidia-cuda-runtime and nvidia-cuda-crt wheels, else from a
    toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda)."""
    candidates = []
    try:
        import nvidia

        candidates += [Path(p) / "cu13" / "include" for p in nvidia.__path__]
    except ImportError:
        pass
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            candidates.append(Path(os.environ[env]) / "include")
    candidates.append(Path("/usr/local/cuda/include"))
    for c in candidates:
        if (c / "mma.h").is_file() and (c / "crt" / "mma.h").is_file() and (c / "cuda_bf16.h").is_file():
            return str(c)
    return None


@cache
def _headers_version() -> str:
    """Which CUDA headers the include path resolves to (part of the cache key; read once a process)."""
    inc = cuda_include_dir()
    if inc is None:
        return "none"
    versions = []
    for dist in ("nvidia-cuda-runtime", "nvidia-cuda-crt"):
        try:
            versions.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            pass
    return f"{inc} ({', '.join(versions) or 'toolkit'})"


def compile_options(arch: str) -> dict:
    return dict(arch=arch, std="c++17", ptxas_options="-v", lineinfo=True)


_USED_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas(log: str, lowered_name: str, dynamic_smem: int = 0) -> ResourceUsage:
    """Read one function's report out of ptxas -v output."""
    start = log.find(f"Compiling entry function '{lowered_name}'")
    if start < 0:
        raise ValueError(f"no ptxas report for {lowered_name} in the compile log")
    block = log[start:]
    nxt = block.find("Compiling entry function", 10)
    block = block[: nxt if nxt > 0 else len(block)]
    regs = _USED_RE.search(block)
    smem = _SMEM_RE.search(block)
    frame = _FRAME_RE.search(block)
    if not (regs and frame):
        raise ValueError(f"unreadable ptxas report for {lowered_name}:\n{block}")
    return ResourceUsage(
        registers=int(regs.group(1)),
        static_smem=int(smem.group(1)) if smem else 0,
        dynamic_smem=dynamic_smem,
        stack_frame=int(frame.group(1)),
        spill_stores=int(frame.group(2)),
        spill_loads=int(frame.group(3)),
        source="ptxas",
    )


def _cache_key(sources: dict[str, str], name_expression: str, arch: str, launch_registers: int | None = None) -> str:
    h = hashlib.sha256()
    payload = dict(
        sources=sorted(sources.items()),
        name_expression=name_expression,
        options=compile_options(arch),
        nvrtc=nvrtc_version(),
        cuda_headers=_headers_version(),
        format=CACHE_FORMAT.decode(),
    )
    if launch_registers is not None:  # the cubin is stored as rewritten (gemmlab.cubin)
        payload["launch_registers"] = launch_registers
    h.update(json.dumps(payload, sort_keys=True).encode())
    return h.hexdigest()


def _write_atomic(path: Path, header: dict, cubin: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps(header).encode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(CACHE_FORMAT + struct.pack("<Q", len(head)) + head + cubin)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_entry(path: Path) -> tuple[dict, bytes] | None:
    """Header and cubin of a cache entry, or None if it is missing or damaged."""
    try:
        data = path.read_bytes()
        if data[:8] != CACHE_FORMAT:
            return None
        (n,) = struct.unpack("<Q", data[8:16])
        header = json.loads(data[16 : 16 + n])
        cubin = data[16 + n :]
        if len(cubin) != header["cubin_bytes"] or hashlib.sha256(cubin).hexdigest() != header["cubin_sha256"]:
            return None
        return header, cubin
    except (OSError, ValueError, KeyError, struct.error):
        return None


def compile_source(
    sources: dict[str, str], main: str, name_expression: str, arch: str, kernel_id: str
) -> tuple[bytes, str, str]:
    """NVRTC-compile sources[main] to cubin; return (cubin, lowered name, log)."""
    from cuda.core import Program, ProgramOptions

    includes = [str(kernels_dir())] + ([inc] if (inc := cuda_include_dir()) else [])
    opts = ProgramOptions(name=main, include_path=includes, **compile_options(arch))
    log = io.StringIO()
    try:
        program = Program(sources[main], "c++", opts)
        obj = program.compile("cubin", name_expressions=(name_expression,), logs=log)
    except Exception as exc:  # cuda.core raises a generic error carrying NVRTC's log
        hint = ""
        if "cannot open source file" in str(exc) and cuda_include_dir() is None:
            hint = "\nCUDA headers not found: pip install 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*' or set CUDA_HOME"
        raise CompileError(f"{kernel_id} ({name_expression}, {arch})", f"{exc}\n{log.getvalue()}{hint}") from None
    lowered = obj.symbol_mapping[name_expression]
    if isinstance(lowered, bytes):
        lowered = lowered.decode()
    return bytes(obj.code), lowered, log.getvalue()


def compile_kernel(spec: KernelSpec, cfg: GemmConfig, arch: str, dtype=None, out_dtype=None, post: int = 0) -> CompiledKernel:
    """The cubin of one kernel, config (and element and result types, for kernels templated on
    them; out_dtype None: the element type; post: the fused epilogue, activations.post_code) for
    arch, from the disk cache or NVRTC."""
    if not spec.builds_for(cfg, dtype, out_dtype):
        raise ValueError(f"{spec.name_expression(cfg, dtype, out_dtype)}: this config writes "
                         f"{', '.join(str(d).removeprefix('torch.') for d in spec.result_types(cfg))} results only")
    main = spec.source
    sources = source_closure(spec.source_path())
    name_expression = spec.name_expression(cfg, dtype, out_dtype, post)
    launch_registers = spec.launch_registers(cfg)
    clock = time.perf_counter()
    key = _cache_key(sources, name_expression, arch, launch_registers)
    path = cache_dir() / f"{spec.id}-{arch}-{key[:24]}.bin"
    entry = _read_entry(path)
    dynamic = spec.dynamic_smem(cfg)
    if entry is not None:
        header, cubin = entry
        usage = ResourceUsage(**{**header["usage"], "dynamic_smem": dynamic})
        return CompiledKernel(spec.id, name_expression, header["lowered_name"], arch, cubin, usage, header["log"], True,
                              (("cache lookup", time.perf_counter() - clock),))  # fmt: skip
    timings = []

    def lap(phase: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings.append((phase, now - clock))
        clock = now

    lap("cache lookup")
    cubin, lowered, log = compile_source(sources, main, name_expression, arch, spec.id)
    lap("nvrtc")
    try:
        usage = parse_ptxas(log, lowered, dynamic)
    except ValueError:
        # A successful compile whose log lacks ptxas's report (NVRTC's own cache, when the
        # variable above came too late). The report is information, not a reason to fail a GEMM:
        # -1 marks it unknown (the driver's attributes still give registers and local memory).
        warnings.warn(f"no ptxas resource report for {name_expression}; resources unknown", RuntimeWarning, stacklevel=2)
        usage = ResourceUsage(-1, -1, dynamic, -1, -1, -1, source="unknown")
    if launch_registers is not None:
        cubin, usage, log = _lower_launch_registers(spec, name_expression, arch, cubin, usage, log, launch_registers)
        lap("launch registers")
    if usage.source == "unknown":  # not cached: the next process compiles again and may get the report
        return CompiledKernel(spec.id, name_expression, lowered, arch, cubin, usage, log, False, tuple(timings))
    header = dict(
        kernel=spec.id,
        name_expression=name_expression,
        lowered_name=lowered,
        arch=arch,
        usage=asdict(usage),
        log=log,
        cubin_bytes=len(cubin),
        cubin_sha256=hashlib.sha256(cubin).hexdigest(),
    )
    _write_atomic(path, header, cubin)
    lap("cache write")
    return CompiledKernel(spec.id, name_expression, lowered, arch, cubin, usage, log, False, tuple(timings))


def _compile_job(job: tuple, arch: str) -> "CompiledKernel | CompileError":
    spec, cfg, dtype, out_dtype, *post = job
    try:
        return compile_kernel(spec, cfg, arch, dtype, out_dtype, *post)
    except CompileError as exc:
        return exc


def compile_many(jobs: list[tuple], arch: str, workers: int = 1):
    """compile_kernel over (spec, config, dtype, out dtype[, post]) jobs, yielding each result (or its
    CompileError) in order; with workers > 1 in that many threads, filling the same disk cache.
    NVRTC lets go of the GIL while it compiles (cuda.bindings), so the threads' compiles run side by
    side: sgemm_11's and sgemm_10's defaults took 0.45 s one after the other and 0.25 s in two
    threads on two cores (docs/notes/cold-start.md), and no worker spends a second importing torch
    and gemmlab first, as a spawned process did."""
    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            yield _compile_job(job, arch)
        return
    import concurrent.futures as cf

    from cuda.core import Program  # noqa: F401  (imported once here: threads importing it at once can
    # see the package half initialised, "cannot import name 'Program' from 'cuda.core.cu13'")

    with cf.ThreadPoolExecutor(min(workers, len(jobs))) as pool:
        yield from pool.map(lambda job: _compile_job(job, arch), jobs)


def _lower_launch_registers(spec: KernelSpec, name_expression: str, arch: str, cubin: bytes, usage: ResourceUsage,
                            log: str, count: int) -> tuple[bytes, ResourceUsage, str]:
    """A kernel compiled for more registers a thread than its block can launch with (see
    gemmlab.cubin), rewritten to start with count; its usage then reports count, the log says both."""
    from . import cubin as cubin_mod
    from .sass import ToolMissing

    try:
        cubin, old, top = cubin_mod.lower_launch_registers(cubin, count)
    except (ValueError, ToolMissing, RuntimeError) as exc:
        raise CompileError(f"{spec.id} ({name_expression}, {arch})",
                           f"its launch register count cannot be lowered to {count}: {exc}") from None
    note = (f"gemmlab: launch register count rewritten from {old} to {count} a thread (the code before "
            f"setmaxnreg names R0-R{top}; setmaxnreg gives the warpgroups their own counts from there)")
    if usage.source != "unknown":
        usage = ResourceUsage(**{**asdict(usage), "registers": count})
    return cubin, usage, f"{log}\n{note}\n"


# ----------------------------------------------------------------------------------------------
# Loading on a GPU.


def arch_for(major: int, minor: int) -> str:
    """The NVRTC target for a compute capability; Hopper and later get the 'a' (arch-specific)
    target, which wgmma, setmaxnreg and TMA multicast need."""
    suffix = "a" if major >= 9 else ""
    return f"sm_{major}{minor}{suffix}"


@lru_cache(maxsize=None)
def device_arch(device_id: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device_id)
    return arch_for(major, minor)


@dataclass
class LoadedKernel:
    spec: KernelSpec
    config: GemmConfig
    compiled: CompiledKernel
    kernel: launch.DriverKernel
    device_ids_with_smem_raised: set

    def driver_usage(self, device_id: int = 0) -> ResourceUsage:
        """What the driver says the loaded kernel uses on the device."""
        def attr(name: str) -> int:
            return self.kernel.attribute(name, device_id)

        return ResourceUsage(
            registers=attr("NUM_REGS"),
            static_smem=attr("SHARED_SIZE_BYTES"),
            dynamic_smem=self.compiled.usage.dynamic_smem,
            stack_frame=attr("LOCAL_SIZE_BYTES"),
            spill_stores=self.compiled.usage.spill_stores,
            spill_loads=self.compiled.usage.spill_loads,
            source="driver",
        )


_loaded: dict[tuple, LoadedKernel] = {}
_lock = threading.Lock()


def load_kernel(spec: KernelSpec, cfg: GemmConfig, device_id: int, dtype=None, out_dtype=None,
                post: int = 0) -> LoadedKernel:  # fmt: skip
    """Compile (or fetch) and load a kernel for a device; cached for the life of the process."""
    arch = device_arch(device_id)
    types = (dtype, out_dtype if out_dtype != dtype else None) if spec.type_param else None
    key = (spec.id, cfg.values, arch, types, post)
    hit = _loaded.get(key)
    if hit is None:
        with _lock:
            hit = _loaded.get(key)
            if hit is None:
                compiled = compile_kernel(spec, cfg, arch, dtype, out_dtype, post)
                launch.ensure_current(device_id)  # (the driver initialised, torch's context current)
                kernel = launch.DriverKernel(compiled.cubin, compiled.lowered_name, spec.id)
                hit = LoadedKernel(spec, cfg, compiled, kernel, set())
                _loaded[key] = hit
    if device_id not in hit.device_ids_with_smem_raised:
        launch.raise_dynamic_smem(hit, device_id)
        hit.device_ids_with_smem_raised.add(device_id)
    return hit


def loaded_kernels() -> list[LoadedKernel]:
    """The kernels loaded in this process so far, in the order they were first loaded (what a first
    call compiled or read from the cache: bench.coldstart lists them)."""
    return list(_loaded.values())


def clear_cache() -> int:
    """Delete every disk cache entry; return how many were removed."""
    n = 0
    d = cache_dir()
    if d.is_dir():
        for p in d.iterdir():
            if p.is_file() and (p.suffix in (".bin", ".tmp")):
                p.unlink(missing_ok=True)
                n += 1
    return n
