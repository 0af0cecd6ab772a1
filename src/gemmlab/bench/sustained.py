"""Sustained throughput: one GEMM launched back to back for seconds, as a training loop would, with
the SM clock, the board power and nvidia-smi's clock-event reasons sampled meanwhile.

`gemmlab bench` times single launches on a cold L2 with idle gaps between them; the card then
runs near its top clock. Run without gaps, a large GEMM draws the board to its power limit
(700 W on an H100 or H200 SXM) and the driver lowers the clock until it stays there; what then
decides the throughput is the work done per clock *and* the energy spent per unit of work. For each
shape cuBLAS runs first and last, the kernels in between, each alone for `seconds`; a kernel's
ratio is against the mean of the two cuBLAS windows. The first second of every window is left out
of its clock and power figures (the controller settling)."""

from __future__ import annotations

from dataclasses import dataclass
import datetime as dt
import subprocess
import time

import torch

from .. import registry
from ..api import prepare
from ..configs import select
from ..problem import problem_from_tensors
from ..reference import check_result
from . import environment
from .run import parse_kernel_config, results_path, write_run

SAMPLE_MS = 50
SETTLE_S = 1.0  # left out of a window's clock and power figures
GAP_S = 0.5  # idle between windows
QUERY = ("timestamp", "clocks.sm", "power.draw", "clocks_event_reasons.active", "temperature.gpu")

# nvidia-smi's clock-event reason bits (nvmlClocksEventReasons)
REASONS = {
    0x1: "idle",
    0x2: "application clocks",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
    0x100: "display clocks",
}


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the epoch
    mhz: float
    watts: float
    reasons: int
    celsius: float


def parse_sample(line: str) -> Sample | None:
    """One line of `nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits`; None if it is
    not one (a header, a blank, '[N/A]' fields)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != len(QUERY):
        return None
    try:
        t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()  # local time, as time.time()
        return Sample(t, float(parts[1]), float(parts[2]), int(parts[3], 16), float(parts[4]))
    except ValueError:
        return None


def decode_reasons(bits: int) -> list[str]:
    names = [name for bit, name in REASONS.items() if bits & bit]
    rest = bits & ~sum(REASONS)
    return names + ([f"0x{rest:x}"] if rest else [])


def summarise(samples: list[Sample], t0: float, t1: float, settle_s: float = SETTLE_S) -> dict:
    """Median clock and power, the hottest temperature and every reason seen, over the samples
    from t0 + settle_s to t1; empty when there are none."""
    inside = [s for s in samples if t0 + settle_s <= s.t <= t1]
    if not inside:
        return {}
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    bits = 0
    for s in inside:
        bits |= s.reasons
    return dict(samples=len(inside), sm_mhz=med([s.mhz for s in inside]), sm_mhz_min=min(s.mhz for s in inside),
                power_w=med([s.watts for s in inside]), temperature_c=max(s.celsius for s in inside),
                reasons=decode_reasons(bits))  # fmt: skip


class Sampler:
    """nvidia-smi sampling the device every SAMPLE_MS in the background, from start() to stop()."""

    def __init__(self, device_id: int = 0):
        self.device_id, self.proc, self.error = device_id, None, None

    def start(self) -> None:
        query = ",".join(QUERY)
        try:  # drivers before 535 name the reasons clocks_throttle_reasons
            if subprocess.run(["nvidia-smi", "--query-gpu=clocks_event_reasons.active", "--format=csv"],
                              capture_output=True, timeout=20).returncode:  # fmt: skip
                query = query.replace("clocks_event_reasons", "clocks_throttle_reasons")
            self.proc = subprocess.Popen(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-lms", str(SAMPLE_MS),
                 "-i", environment.nvidia_smi_id(self.device_id)],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
        except (OSError, subprocess.SubprocessError) as exc:
            self.error = f"nvidia-smi could not sample: {exc}"

    def stop(self) -> list[Sample]:
        if self.proc is None:
            return []
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=20)
        return [s for s in map(parse_sample, out.splitlines()) if s is not None]


def _window(name: str, config, fn, n_flops: float, seconds: float) -> dict:
    """Run fn back to back for `seconds`; its event-timed mean time per call."""
    time.sleep(GAP_S)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    calls, batch = 0, 8
    start.record()
    while time.time() - t0 < seconds:
        t_batch = time.time()
        for _ in range(batch):
            fn()
        calls += batch
        torch.cuda.synchronize()  # keeps the queue short, so the window ends when the clock says
        if time.time() - t_batch < 0.005 and batch < 4096:
            batch *= 2  # small problems: more launches between waits, so the GPU never idles on the host
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / calls
    return dict(name=name, config=config, t0=t0, t1=time.time(), calls=calls, mean_ms=ms, tflops=n_flops / ms / 1e9)


def sustained_shape(kernels: list[str], shape: tuple[int, int, int], dtype: torch.dtype, precision: str,
                    seconds: float, device_id: int) -> list[dict]:  # fmt: skip
    """cuBLAS, each kernel, cuBLAS again, each for `seconds`; every kernel's result checked
    against float64 first."""
    M, N, K = shape
    dev = f"cuda:{device_id}"
    a = (torch.rand((M, K), device=dev) * 2 - 1).to(dtype)
    b = (torch.rand((K, N), device=dev) * 2 - 1).to(dtype)
    out = torch.full((M, N), float("nan"), device=dev, dtype=dtype)
    ref = torch.empty((M, N), device=dev, dtype=dtype)
    tf32 = precision == "tf32"

    def cublas():
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.mm(a, b, out=ref)

    launches = []
    for text in kernels:
        kid, config = ("auto", None) if text == "auto" else parse_kernel_config(text)
        spec, cfg = select(problem_from_tensors(a, b, None, out, precision=precision), kid)
        kid, cfg = spec.id, config or cfg  # 'auto': the kernel it chose for this shape
        fn = prepare(a, b, kernel=kid, out=out, config=cfg, precision=precision)
        out.fill_(float("nan"))
        fn()
        err = check_result(out, a, b, precision=precision)
        if not err.passed:
            raise RuntimeError(f"{kid} M={M} N={N} K={K}: wrong result before timing ({err.summary()})")
        launches.append((kid, cfg.as_dict(), fn))
    cublas()  # cuBLAS's own warm-up: its handle and workspace
    torch.cuda.synchronize()
    flops = 2.0 * M * N * K
    try:
        windows = [_window("cublas", None, cublas, flops, seconds)]
        windows += [_window(kid, cfg, fn, flops, seconds) for kid, cfg, fn in launches]
        windows.append(_window("cublas", None, cublas, flops, seconds))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = False
    for w in windows:
        w.update(M=M, N=N, K=K)
    return windows


def ratios(windows: list[dict]) -> None:
    """Each kernel window's ratio to the mean of its shape's cuBLAS windows (in place)."""
    base = [w["tflops"] for w in windows if w["name"] == "cublas"]
    ref = sum(base) / len(base)
    for w in windows:
        w["cublas_tflops"] = ref
        w["ratio"] = w["tflops"] / ref


def check_kernels(kernels: list[str], dtype: torch.dtype, precision: str) -> None:
    """ValueError unless every kernel ('auto', an id, or id[NAME=VALUE,...]) is a GPU kernel
    taking dtype in that precision."""
    for k in kernels:
        if k == "auto":
            continue
        spec = registry.get(parse_kernel_config(k)[0])  # ValueError naming the registered ids
        if spec.device != "cuda" or dtype not in spec.dtypes or (dtype == torch.float32 and spec.math != precision):
            what = "float32 with TF32 math" if precision == "tf32" else str(dtype).removeprefix("torch.")
            raise ValueError(f"{spec.id} does not take {what} on the GPU")


def run_sustained(kernels: list[str], shapes: list[tuple[int, int, int]], out_root, dtype: torch.dtype,
                  precision: str = "fp32", dtype_label: str = "", seconds: float = 3.0, device_id: int = 0,
                  on_start=None, on_window=None):  # fmt: skip
    check_kernels(kernels, dtype, precision)
    meta = environment.describe(device_id)
    meta.update(kind="sustained", seconds=seconds, sample_ms=SAMPLE_MS, settle_s=SETTLE_S,
                dtype=dtype_label or str(dtype).removeprefix("torch."))  # fmt: skip
    path = results_path(out_root, meta, "sustained")
    records: list[dict] = []
    sampler = Sampler(device_id)
    sampler.start()
    try:
        for shape in shapes:
            if on_start:
                on_start(shape)
            windows = sustained_shape(kernels, shape, dtype, precision, seconds, device_id)
            ratios(windows)
            records += windows
    finally:
        samples = sampler.stop()
    if sampler.error or not samples:
        meta["sampling"] = sampler.error or "nvidia-smi returned no samples: clocks and power not recorded"
    for w in records:
        w.update(summarise(samples, w["t0"], w["t1"]))
        if on_window:
            on_window(w)
    write_run(path, meta, records)
    return path, records
