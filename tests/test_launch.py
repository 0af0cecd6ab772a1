"""The driver launch path without a GPU: what bytes each argument hands a kernel parameter, the
clustered launch's configuration, and a plan's Launcher writing each call's values into the
arguments it made on its first call."""

import ctypes

import threading

import numpy as np
import pytest
import torch

from gemmlab import launch


def _bytes(params, values) -> list[bytes]:
    """What each packed argument's address points at."""
    return [ctypes.string_at(params[i], ctypes.sizeof(v)) for i, v in enumerate(values)]


def test_arguments_reach_their_parameters_as_their_c_types():
    tmap = (ctypes.c_ubyte * 128)(*range(128))
    args = (tmap, 0x7F0012345600, np.int32(-7), np.int64(1 << 40), np.float32(0.5), 2.5, True, -3, ctypes.c_int16(9),
            np.int32(3))  # fmt: skip
    values, params = launch.packed_args(args)
    want = [bytes(range(128)), (0x7F0012345600).to_bytes(8, "little"), (-7).to_bytes(4, "little", signed=True),
            (1 << 40).to_bytes(8, "little"), np.float32(0.5).tobytes(), np.float64(2.5).tobytes(), b"\x01",
            (-3).to_bytes(8, "little", signed=True), (9).to_bytes(2, "little"), (3).to_bytes(4, "little")]  # fmt: skip
    assert _bytes(params, values) == want and values[0] is tmap  # (a map by address, not copied)
    # one struct a call in a buffer of the thread's: the same bytes, each field where C would put it
    sizes = [len(w) for w in want]
    for _ in range(2):  # (the second call reuses the buffer)
        params = launch.packed_once(args)
        assert [ctypes.string_at(params[i], n) for i, n in enumerate(sizes)] == want
        assert all(params[i] % min(n, 8) == 0 for i, n in enumerate(sizes) if n <= 8)  # aligned as C aligns them
    params = launch.packed_once((np.int32(1), 7))
    assert params[1] - params[0] == 8 and ctypes.string_at(params[1], 8) == (7).to_bytes(8, "little")
    for bad in ("a string", b"bytes"):
        with pytest.raises(TypeError, match="no C type"):
            launch.packed_args((bad,))
        with pytest.raises(TypeError, match="no C type"):
            launch.packed_once((1, bad))


def test_clustered_launch_counts_blocks_in_whole_clusters():
    """The driver's grid counts blocks (cuda.core's LaunchConfig counted clusters: unconverted, a
    persistent grid of 132 blocks once ran 264); a grid of partial clusters is refused."""
    cfg = launch.launch_config((132, 1, 1), (384, 1, 1), 1024, (2, 1, 1))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.sharedMemBytes) == (132, 1, 1, 384, 1024)
    assert cfg.numAttrs == 1 and (cfg.attrs[0].value.clusterDim.x, cfg.attrs[0].value.clusterDim.y) == (2, 1)
    with pytest.raises(ValueError, match="not whole clusters"):
        launch.launch_config((131, 1, 1), (384, 1, 1), 0, (2, 1, 1))
    plain = launch.launch_config((131, 1, 1), (384, 1, 1), 0)  # no cluster: no attribute
    assert (plain.gridDimX, plain.numAttrs, bool(plain.attrs)) == (131, 0, False)


def test_launch_structures_are_the_drivers():
    """The ctypes CUlaunchConfig and CUlaunchAttribute cuLaunchKernelEx is called with hold the
    bytes cuda.bindings' own structures of the same values hold (its layout of cuda.h's)."""
    from cuda.bindings import driver

    assert launch.CLUSTER_DIMENSION == int(driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
    theirs = driver.CUlaunchAttribute()
    theirs.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    theirs.value.clusterDim.x, theirs.value.clusterDim.y, theirs.value.clusterDim.z = 2, 1, 1
    ours = launch.launch_config((132, 1, 1), (384, 1, 1), 200704, (2, 1, 1))
    assert ctypes.sizeof(launch.LaunchAttribute) == 72
    assert ctypes.string_at(theirs.getPtr(), 72) == ctypes.string_at(ctypes.addressof(ours.attrs[0]), 72)
    cfg = driver.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 132, 1, 1, 384, 1, 1
    cfg.sharedMemBytes, cfg.hStream, cfg.numAttrs = 200704, driver.CUstream(0x1234560), 1
    ours.hStream = 0x1234560
    raw_theirs, raw_ours = ctypes.string_at(cfg.getPtr(), 56), bytes(ours)
    assert ctypes.sizeof(launch.LaunchConfig) == 56
    assert raw_theirs[:40] == raw_ours[:40] and raw_theirs[48:52] == raw_ours[48:52]  # (all but the attrs pointer)
    ours.hStream = None


def test_launcher_writes_each_calls_values(monkeypatch):
    """A Launcher makes its arguments' ctypes values on the first call and writes later calls'
    values into them; the bytes the driver reads are each call's own, and a call with other
    argument types packs them again."""
    from types import SimpleNamespace

    seen = []

    def fake_launch(config, func, stream, params, name):
        seen.append([ctypes.string_at(params[i], n) for i, n in enumerate((128, 8, 4, 4))])

    monkeypatch.setattr(launch, "launch_packed", fake_launch)
    monkeypatch.setattr(launch, "ensure_current", lambda device_id: None)
    monkeypatch.setattr(launch, "current_stream_handle", lambda device_id: 0)
    monkeypatch.setattr(launch, "function_handle", lambda loaded, device_id: 0)
    loaded = SimpleNamespace(spec=SimpleNamespace(id="k"), compiled=SimpleNamespace(usage=SimpleNamespace(dynamic_smem=0)))
    run = launch.Launcher(loaded, 0, (1, 1, 1), (128, 1, 1))
    maps = [(ctypes.c_ubyte * 128)(*([v] * 128)) for v in (1, 2)]
    run(maps[0], 1000, np.int32(5), np.float32(1.5))
    run(maps[1], 2000, np.int32(6), np.float32(-2.0))
    run(maps[1], 3000, 7, np.float32(-2.0))  # another type in the third place: packed again
    assert seen[0] == [bytes([1] * 128), (1000).to_bytes(8, "little"), (5).to_bytes(4, "little"), np.float32(1.5).tobytes()]
    assert seen[1] == [bytes([2] * 128), (2000).to_bytes(8, "little"), (6).to_bytes(4, "little"), np.float32(-2.0).tobytes()]
    assert seen[2][1:3] == [(3000).to_bytes(8, "little"), (7).to_bytes(4, "little")]


def _stand_in_driver(monkeypatch, record):
    """launch's cuLaunchKernelEx replaced by a Python callback behind its C prototype, which hands
    record the configuration's contents, the function's address and the argument array's address
    (the values are read inside the call, as the driver reads them); the rest of the launch path's
    driver calls stood in for."""
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(launch.LaunchConfig), ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p)  # fmt: skip
    callback = proto(lambda config, func, params, extra: record(config.contents, func,
                                                                 ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))))
    monkeypatch.setattr(launch, "_LAUNCH", callback)
    monkeypatch.setattr(launch, "ensure_current", lambda device_id: None)
    monkeypatch.setattr(launch, "current_stream_handle", lambda device_id: 0x5000)


def test_threads_sharing_a_launcher_each_launch_their_own_arguments(monkeypatch):
    """A plan's Launcher is shared by every thread that hits the plan: each launch hands the driver
    exactly its own call's arguments, never a mix of two calls'."""
    from types import SimpleNamespace

    seen, lock = [], threading.Lock()

    def record(config, func, params):
        got = (ctypes.c_int64.from_address(params[0]).value, ctypes.c_int32.from_address(params[1]).value,
               ctypes.c_int64.from_address(params[2]).value)  # fmt: skip
        with lock:
            seen.append(got)
        return 0

    _stand_in_driver(monkeypatch, record)
    monkeypatch.setattr(launch, "function_handle", lambda loaded, device_id: 0xF00)
    loaded = SimpleNamespace(spec=SimpleNamespace(id="k"), compiled=SimpleNamespace(usage=SimpleNamespace(dynamic_smem=0)))
    run = launch.Launcher(loaded, 0, (4, 1, 1), (128, 1, 1))
    size = np.int32(64)  # (one object, as a plan's sizes are)

    def worker(t: int):
        for i in range(300):
            run(1000 * t + i, size, -(1000 * t + i))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 1200 and all(a == -c and b == 64 for a, b, c in seen)
    assert sorted(a for a, _, _ in seen) == sorted(1000 * t + i for t in range(4) for i in range(300))


def test_launch_hands_the_driver_its_configuration_and_arguments(monkeypatch):
    """launch() and a Launcher through ctypes into a stand-in for cuLaunchKernelEx (a Python
    callback behind the same C prototype): the configuration's geometry, stream and cluster, the
    function's address and each argument's bytes arrive; an error code becomes a RuntimeError."""
    from types import SimpleNamespace

    seen = []

    def record(c, func, params):
        cluster = (c.attrs[0].value.clusterDim.x, c.attrs[0].value.clusterDim.y) if c.numAttrs else None
        args = [ctypes.string_at(params[i], n) for i, n in enumerate((8, 4, 4))]
        seen.append(((c.gridDimX, c.blockDimX, c.sharedMemBytes, c.hStream, cluster), func, args))
        return 1 if func == 0xBAD else 0

    _stand_in_driver(monkeypatch, record)
    func = {"k": 0xF00}
    monkeypatch.setattr(launch, "function_handle", lambda loaded, device_id: func[loaded.spec.id])
    loaded = SimpleNamespace(spec=SimpleNamespace(id="k"), compiled=SimpleNamespace(usage=SimpleNamespace(dynamic_smem=4096)))
    launch.launch(loaded, 0, (6, 1, 1), (128, 1, 1), 0x1234, np.int32(7), np.float32(2.0), cluster=(2, 1, 1))
    launch.Launcher(loaded, 0, (4, 1, 1), (256, 1, 1))(0x99, np.int32(-1), np.float32(0.5))
    assert seen[0] == ((6, 128, 4096, 0x5000, (2, 1)), 0xF00,
                       [(0x1234).to_bytes(8, "little"), (7).to_bytes(4, "little"), np.float32(2.0).tobytes()])
    assert seen[1] == ((4, 256, 4096, 0x5000, None), 0xF00,
                       [(0x99).to_bytes(8, "little"), (-1).to_bytes(4, "little", signed=True), np.float32(0.5).tobytes()])
    func["k"] = 0xBAD
    with pytest.raises(RuntimeError, match="launching k .*CUDA_ERROR_INVALID_VALUE"):
        launch.launch(loaded, 0, (6, 1, 1), (128, 1, 1), 1, np.int32(1), np.float32(1.0))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_threads_hitting_one_plan_get_their_own_products(dtype):
    """Threads multiplying tensors of one kind at once (one plan, so one Launcher; any one-off
    launch behind it packs into the thread's own buffer), each on fresh tensors: every product
    matches float64 within the dtype's rounding."""
    import gemmlab

    wrong = []

    def worker():
        for _ in range(20):
            a = torch.randn(100, 64, device="cuda").to(dtype)
            b = torch.randn(64, 72, device="cuda").to(dtype)
            d = gemmlab.gemm(a, b)
            want = a.double() @ b.double()
            if not torch.allclose(d.double(), want, rtol=2e-2, atol=5e-2):
                wrong.append(float((d.double() - want).abs().max()))

    gemmlab.gemm(torch.randn(100, 64, device="cuda").to(dtype), torch.randn(64, 72, device="cuda").to(dtype))
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    assert not wrong, f"{len(wrong)} of 80 products wrong, max errors {wrong[:5]}"
