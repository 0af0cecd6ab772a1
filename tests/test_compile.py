"""Every kernel compiles for sm_90a through NVRTC (no GPU needed); the resource report is read
from ptxas; the disk cache is keyed, atomic and self-healing."""

import os
import subprocess
import sys

import pytest
import torch

from gemmlab import jit, registry
from gemmlab.registry import KERNELS

ARCH = "sm_90a"


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _types(k):
    """(input, result) type pairs a kernel is instantiated for: the 16-bit kernels for each input
    type, writing it or float32."""
    if not k.type_param:
        return [(None, None)]
    return [(d, o) for d in k.dtypes for o in (d, torch.float32)]


def _case_id(k, d, o):
    if d is None:
        return k.id
    name = f"{k.id}-{str(d).removeprefix('torch.')}"
    return name + ("-fp32out" if o != d else "")


COMPILE_CASES = [pytest.param(k, d, o, id=_case_id(k, d, o)) for k in KERNELS + registry.PENDING for d, o in _types(k)]


@pytest.mark.parametrize("spec,dtype,out_dtype", COMPILE_CASES)
def test_compiles_for_hopper_with_resource_report(spec, dtype, out_dtype):
    ck = jit.compile_kernel(spec, spec.default_config(), ARCH, dtype, out_dtype)
    assert ck.cubin[:4] == b"\x7fELF"
    assert ck.arch == ARCH and ck.lowered_name.startswith("_Z")
    u = ck.usage
    assert 1 <= u.registers <= 255
    if spec.spill_free:
        assert u.spills == 0 and u.stack_frame == 0, f"{spec.id} spills: {u}"


def test_static_shared_memory_is_reported():
    spec = registry.get("sgemm_03_smem_tile")
    ck = jit.compile_kernel(spec, spec.config(TILE=16), ARCH)
    assert ck.usage.static_smem == 2 * 16 * 16 * 4


@pytest.mark.parametrize("spec,buffers", [(registry.SGEMM_08, 1), (registry.SGEMM_10, 2), (registry.SGEMM_11, 2)],
                         ids=lambda x: getattr(x, "id", None) or str(x))
def test_padded_and_double_buffered_tiles_are_what_ptxas_reports(spec, buffers):
    c = spec.default_config()
    floats = c["BK"] * (c["BM"] + c["PAD"]) + c["BK"] * c["BN"]  # [BK][BM + PAD] and [BK][BN]
    assert jit.compile_kernel(spec, c, ARCH).usage.static_smem == buffers * floats * 4


def test_compile_error_names_kernel_and_carries_log():
    bad = {"bad.cu": "template <int T> __global__ void k(float* x) { x[0] = undefined_name; }"}
    with pytest.raises(jit.CompileError) as info:
        jit.compile_source(bad, "bad.cu", "k<1>", ARCH, "bad_kernel")
    assert info.value.kernel.startswith("bad_kernel")
    assert "undefined_name" in info.value.log
    assert "bad_kernel" in str(info.value)


def test_parse_ptxas_reads_spills():
    log = (
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z1kv\n"
        "ptxas         .     24 bytes stack frame, 16 bytes spill stores, 8 bytes spill loads\n"
        "ptxas info    : Used 255 registers, used 1 barriers, 4096 bytes smem, 380 bytes cmem[0]\n"
    )
    u = jit.parse_ptxas(log, "_Z1kv", dynamic_smem=100)
    assert (u.registers, u.static_smem, u.stack_frame, u.spill_stores, u.spill_loads, u.dynamic_smem) == (
        255, 4096, 24, 16, 8, 100)
    with pytest.raises(ValueError):
        jit.parse_ptxas(log, "_Z5otherv")


def test_cache_dir_override_hit_and_key(fresh_cache):
    spec = registry.get("sgemm_02_coalesced")
    cfg = spec.default_config()
    first = jit.compile_kernel(spec, cfg, ARCH)
    assert not first.from_cache and jit.cache_dir() == fresh_cache
    entries = list(fresh_cache.glob("*.bin"))
    assert len(entries) == 1
    second = jit.compile_kernel(spec, cfg, ARCH)
    assert second.from_cache and second.cubin == first.cubin and second.usage == first.usage
    # another config, another entry
    jit.compile_kernel(spec, spec.config(BX=16), ARCH)
    assert len(list(fresh_cache.glob("*.bin"))) == 2


def test_key_covers_included_headers(tmp_path):
    root = tmp_path / "k"
    (root / "common").mkdir(parents=True)
    (root / "common" / "h.cuh").write_text("#define V 1\n")
    (root / "main.cu").write_text('#include "common/h.cuh"\n__global__ void k() {}\n')
    one = jit.source_closure(root / "main.cu", root)
    assert set(one) == {"main.cu", "common/h.cuh"}
    k1 = jit._cache_key(one, "k", ARCH)
    (root / "common" / "h.cuh").write_text("#define V 2\n")
    k2 = jit._cache_key(jit.source_closure(root / "main.cu", root), "k", ARCH)
    assert k1 != k2
    assert jit._cache_key(one, "k", "sm_80") != k1


def test_damaged_entry_is_recompiled(fresh_cache):
    spec = registry.get("sgemm_01_naive")
    cfg = spec.default_config()
    good = jit.compile_kernel(spec, cfg, ARCH)
    (entry,) = fresh_cache.glob("*.bin")
    data = entry.read_bytes()
    entry.write_bytes(data[: len(data) // 2])  # torn
    again = jit.compile_kernel(spec, cfg, ARCH)
    assert not again.from_cache and again.cubin == good.cubin
    entry.write_bytes(b"garbage")
    assert not jit.compile_kernel(spec, cfg, ARCH).from_cache
    assert jit.compile_kernel(spec, cfg, ARCH).from_cache


def test_two_processes_compiling_at_once(fresh_cache):
    code = (
        "from gemmlab import jit, registry\n"
        "s = registry.get('sgemm_03_smem_tile')\n"
        "c = jit.compile_kernel(s, s.default_config(), 'sm_90a')\n"
        "print(len(c.cubin), c.lowered_name)\n"
    )
    env = dict(os.environ, GEMMLAB_CACHE_DIR=str(fresh_cache))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert outs[0][0] == outs[1][0]
    assert list(fresh_cache.glob("*.tmp*")) == []
    (entry,) = fresh_cache.glob("*.bin")
    assert jit._read_entry(entry) is not None
    spec = registry.get("sgemm_03_smem_tile")
    assert jit.compile_kernel(spec, spec.default_config(), ARCH).from_cache


def test_clear_cache(fresh_cache):
    spec = registry.get("sgemm_01_naive")
    jit.compile_kernel(spec, spec.default_config(), ARCH)
    assert jit.clear_cache() == 1
    assert list(fresh_cache.glob("*.bin")) == []


def test_arch_for_capabilities():
    assert jit.arch_for(9, 0) == "sm_90a"
    assert jit.arch_for(8, 6) == "sm_86"


@pytest.mark.compile_all
def test_every_config_auto_can_choose_compiles_without_spills():
    """Size-rule configs, in every type pair the kernel is built for (tc09 with CM=1 and an fp32
    result once spilled 16 bytes where its default config did not), and none with its wgmma
    serialised by ptxas (tc07's hand-over, EPI = 0, drew it in every form but the one it has)."""
    from gemmlab.configs import configs_in_use

    for spec in KERNELS:
        for cfg in configs_in_use(spec)[1:]:  # the default is test_compiles_for_hopper_..., every type pair
            for dtype, out_dtype in _types(spec):
                if not spec.builds_for(cfg, dtype, out_dtype):  # tc07's one staging buffer: 16-bit results
                    continue
                ck = jit.compile_kernel(spec, cfg, ARCH, dtype, out_dtype)
                u, name = ck.usage, spec.name_expression(cfg, dtype, out_dtype)
                assert u.spills == 0 and u.stack_frame == 0, f"{name}: {u}"
                assert "serialized" not in ck.log and "C751" not in ck.log, f"{name}: {ck.log}"


def test_missing_ptxas_report_is_a_warning_not_a_failure(fresh_cache, monkeypatch):
    real = jit.compile_source

    def without_report(*args, **kw):
        cubin, lowered, log = real(*args, **kw)
        return cubin, lowered, ""

    monkeypatch.setattr(jit, "compile_source", without_report)
    spec = registry.get("sgemm_02_coalesced")
    with pytest.warns(RuntimeWarning, match="no ptxas resource report"):
        ck = jit.compile_kernel(spec, spec.default_config(), ARCH)
    assert ck.cubin[:4] == b"\x7fELF" and ck.usage.registers == -1 and ck.usage.source == "unknown"
    assert list(fresh_cache.glob("*.bin")) == []  # an incomplete report is not cached


def test_nvrtc_program_cache_is_off_unless_the_user_set_it():
    """NVRTC's own cache returns a program it has seen without ptxas's -v report (an empty log on
    a warm H100 machine); gemmlab turns it off when it is imported, before NVRTC loads, and keeps
    a value the user set."""
    code = "import os, gemmlab.jit; print(os.environ['CUDA_CACHE_DISABLE'])"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_CACHE_DISABLE"}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "1"
    kept = subprocess.run([sys.executable, "-c", code], env=env | {"CUDA_CACHE_DISABLE": "0"}, capture_output=True, text=True)
    assert kept.stdout.strip() == "0"


def test_a_second_compile_of_one_program_still_reports_resources():
    """The same source compiled twice in one process (gemmlab's own cache bypassed): ptxas's
    report is in both logs. (It failed only on a GPU machine, where NVRTC's cache is live: on an
    H100 before conftest set CUDA_CACHE_DISABLE ahead of torch's CUDA init, passed after.)"""
    spec = registry.get("sgemm_04_thread_tile_1d")
    src = jit.source_closure(spec.source_path())
    name = spec.name_expression(spec.default_config(), None, None)
    logs = [jit.compile_source(src, spec.source, name, "sm_90a", spec.id)[2] for _ in range(2)]
    assert all("Compiling entry function" in log and "Used" in log for log in logs)


def test_a_compile_says_how_long_each_phase_took(fresh_cache):
    """CompiledKernel.timings: the lookup, NVRTC, the launch-register rewrite where a config has
    one (tc07's 128 x 256 tile with the hand-over, which gemm() runs a 2048^3 bf16 problem with),
    the write; a cache hit only its lookup."""
    tc07 = registry.TC_07
    cfg = tc07.config(EPI=0, CM=1)
    assert tc07.launch_registers(cfg) is not None
    ck = jit.compile_kernel(tc07, cfg, ARCH, torch.bfloat16)
    assert [p for p, _ in ck.timings] == ["cache lookup", "nvrtc", "launch registers", "cache write"]
    assert all(s >= 0 for _, s in ck.timings) and dict(ck.timings)["nvrtc"] > 0.05  # a compile, not a lookup
    s11 = registry.SGEMM_11
    assert [p for p, _ in jit.compile_kernel(s11, s11.default_config(), ARCH).timings] == ["cache lookup", "nvrtc", "cache write"]
    hit = jit.compile_kernel(tc07, cfg, ARCH, torch.bfloat16)
    assert hit.from_cache and [p for p, _ in hit.timings] == ["cache lookup"]
    assert hit == ck.__class__(**{**ck.__dict__, "from_cache": True, "timings": ()})  # timings take no part in equality


def test_key_covers_the_compiler_and_the_headers(monkeypatch):
    """nvrtc_version and _headers_version are read once a process, and still part of every key."""
    spec = registry.get("sgemm_02_coalesced")
    src = jit.source_closure(spec.source_path())
    base = jit._cache_key(src, "k", ARCH)
    assert jit._cache_key(src, "k", ARCH) == base
    monkeypatch.setattr(jit, "nvrtc_version", lambda: "13.9 (another)")
    assert jit._cache_key(src, "k", ARCH) != base
    monkeypatch.undo()
    monkeypatch.setattr(jit, "_headers_version", lambda: "/elsewhere (nvidia-cuda-runtime 13.9)")
    assert jit._cache_key(src, "k", ARCH) != base


def test_nvrtc_version_from_the_wheel_is_the_librarys(monkeypatch):
    """The key's NVRTC version read from the wheel (no library loaded) says what the library says;
    with another NVRTC mapped into the process, or no wheel, the library is asked."""
    assert jit.nvrtc_version.__wrapped__() == jit.library_nvrtc_version()
    monkeypatch.setattr(jit, "_only_wheel_nvrtc_loaded", lambda: False)
    monkeypatch.setattr(jit, "library_nvrtc_version", lambda: "12.9 (asked)")
    assert jit.nvrtc_version.__wrapped__() == "12.9 (asked)"


def test_compile_many_in_threads_yields_what_one_at_a_time_gives(tmp_path, monkeypatch):
    """Threads (NVRTC lets go of the GIL): the same cubins and reports, in the jobs' order, and a job
    that fails yields its CompileError in its place without stopping the others."""
    specs = [registry.get(k) for k in ("sgemm_03_smem_tile", "sgemm_04_thread_tile_1d", "sgemm_02_coalesced")]
    jobs = [(s, s.default_config(), None, None) for s in specs]
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "one"))
    alone = list(jit.compile_many(jobs, ARCH, workers=1))
    real = jit.compile_source

    def failing(sources, main, name, arch, kernel_id):
        if kernel_id == "sgemm_04_thread_tile_1d":
            raise jit.CompileError(kernel_id, "refused by the test")
        return real(sources, main, name, arch, kernel_id)

    monkeypatch.setattr(jit, "compile_source", failing)
    monkeypatch.setenv("GEMMLAB_CACHE_DIR", str(tmp_path / "threads"))
    threaded = list(jit.compile_many(jobs, ARCH, workers=3))
    assert isinstance(threaded[1], jit.CompileError) and "refused by the test" in threaded[1].log
    for a, b in ((alone[0], threaded[0]), (alone[2], threaded[2])):
        assert not b.from_cache and (a.kernel_id, a.cubin, a.usage) == (b.kernel_id, b.cubin, b.usage)


def test_split_k_reduction_builds_compile_without_spills():
    """Step 12 with RED = 1 (the runs store row-major parts and return) for each candidate tile,
    plain and with SiLU (the longest fused epilogue), and the reduction pass with each epilogue."""
    from gemmlab.activations import post_code
    from gemmlab.configs.fp32 import split_k_tiles
    from gemmlab.specs.sgemm import SPLIT_K_REDUCE

    split = registry.get("sgemm_12_split_k")
    jobs = [(split, cfg, None, None, post) for cfg in split_k_tiles(1, 1) for post in (0, post_code(True, "silu"))]
    jobs += [(SPLIT_K_REDUCE, SPLIT_K_REDUCE.default_config(), None, None, post)
             for post in (0, *(post_code(True, a) for a in (None, "relu", "gelu", "gelu_tanh", "silu")))]  # fmt: skip
    for job, ck in zip(jobs, jit.compile_many(jobs, ARCH, workers=os.cpu_count() or 1)):
        assert not isinstance(ck, Exception), f"{job[0].id} {job[1].as_dict()}: {ck}"
        u = ck.usage
        assert u.spills == 0 and u.stack_frame == 0 and 1 <= u.registers <= 255, f"{ck.name_expression}: {u}"
