"""What a record must say about where it was measured: GPU, clocks, driver, versions, commit."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import subprocess
from importlib import metadata

import torch


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def git_commit() -> str:
    """GEMMLAB_COMMIT if set (the device machine gets a tree without .git), else git's HEAD."""
    env = os.environ.get("GEMMLAB_COMMIT")
    if env:
        return env
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=10)
        if head.returncode == 0:
            return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def gpu_slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def nvidia_smi_id(device_id: int = 0) -> str:
    """The device as nvidia-smi -i takes it: its PCI bus id (torch's numbering can differ from
    nvidia-smi's under CUDA_VISIBLE_DEVICES), else the index."""
    try:
        bus = torch.cuda.get_device_properties(device_id)
        return f"{bus.pci_domain_id:08x}:{bus.pci_bus_id:02x}:{bus.pci_device_id:02x}.0"
    except Exception:
        return str(device_id)


def clocks(device_id: int = 0) -> dict:
    """SM and memory clocks (MHz), temperature and power now, from nvidia-smi; {} if unavailable."""
    fields = ["clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "power.draw"]
    sel = nvidia_smi_id(device_id)
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits", "-i", sel],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    if out.returncode != 0 or not out.stdout.strip():
        return {}
    values = [v.strip() for v in out.stdout.strip().splitlines()[0].split(",")]
    result = {}
    for f, v in zip(fields, values):
        try:
            result[f] = float(v)
        except ValueError:
            result[f] = v
    return result


def driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo), else what platform knows."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe(device_id: int = 0) -> dict:
    from ..jit import nvrtc_version

    props = torch.cuda.get_device_properties(device_id)
    return dict(
        time=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        commit=git_commit(),
        gpu=props.name,
        gpu_slug=gpu_slug(props.name),
        compute_capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        l2_bytes=getattr(props, "L2_cache_size", None),
        memory_bytes=props.total_memory,
        driver=driver_version(),
        clocks_idle=clocks(device_id),
        versions=dict(
            python=platform.python_version(),
            torch=torch.__version__,
            torch_cuda=torch.version.cuda,
            cuda_core=_version("cuda-core"),
            cuda_bindings=_version("cuda-bindings"),
            nvrtc=nvrtc_version(),
            gemmlab=_version("gemmlab") or "source tree",
        ),
        host=platform.node(),
    )
