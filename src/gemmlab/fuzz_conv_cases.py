"""The convolutions `gemmlab conv-fuzz` draws (gemmlab.fuzz_conv runs and judges them): `ConvCase`,
every choice of one fixed by its seed, and `draw`, which aims the geometry at a regime where conv02,
conv03 and conv04 are likely to go wrong -- conv03's tile edges, short reductions, several tiles a
persistent block, odd geometry, a network's layers, conv06's filter gradients -- within MAX_* work
limits, and picks an
algorithm that serves it (FALLBACK where the one drawn refuses). conv04's cases ("gather") take the
regime's geometry with few input channels (mostly no multiple of 8), at most 256 output channels,
within its builds' filter entries and shared memory, and in the layer regime the stem for half of
them. For a share of conv03's cases a tile its rule would not pick or its staged TMA-store
epilogue, and for a share of conv02's, conv03's and conv04's cases a backward pass too (`grad`:
dx, dw and db checked beside y). A share of the forward cases are grouped (`groups`): the drawn
geometry is one group's, repeated over the channels, so each group is a convolution of the regime
on channel slices of the input and the filter."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
import json
import random
from typing import Callable

import torch

from .conv import conv_geometry
from .fuzz import _log_int, _weighted
from .specs.conv import CONV03_BK, CONV03_TILES, CONV04_MAX_K, CONV_03, CONV_04, conv04_config
from .tma import im2col_why_not

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
ALGORITHM_WEIGHTS = {"tma": 0.37, "implicit": 0.21, "gather": 0.17, "im2col": 0.25, "depthwise": 0.06}
# where the drawn one refuses, the next that serves runs: conv2d's algorithm="auto" order
FALLBACK = {"tma": ("implicit", "gather", "im2col"), "implicit": ("gather", "im2col"), "gather": ("im2col",),
            "im2col": (), "depthwise": ("im2col",)}  # fmt: skip
STEPS = ("tma", "implicit", "gather")  # the algorithms of our own GEMM kernels, run a group at a time
GRAD_ALGORITHMS = (*STEPS, "depthwise")  # those whose cases may check gradients (conv05: its own dgrad and wgrad)
FP32_SHARE = 0.15  # of the im2col cases, float32 ones (gemm()'s FFMA ladder; cuDNN with TF32 off)
SPECIAL_SHARE = 0.04  # of the cases with a NaN or an Inf in x or w
TILE_SHARE = 0.25  # of conv03's cases, those on a tile of CONV03_TILES forced (conv03.TILE), whatever the rule's
STAGED_SHARE = 0.25  # of conv03's cases, those with its staged TMA-store epilogue forced on (conv03.TMA_STORE)
REGISTER_SHARE = 0.25  # of conv03's other cases, those with its register epilogue forced (conv03.TMA_STORE off)
GRAD_SHARE = 0.25  # of conv02's, conv03's, conv04's and conv05's cases, those whose gradients (dx, dw, db) are checked too
DGRAD_ON_STEP = 0.75  # of those, the share whose K is made a multiple of 8, so dx runs on conv02/conv03 (conv04's
# others: dx's convolution reads K channels, no multiple of 8, and runs on conv04 where its build holds it)
FEW_SHARE = 0.85  # of conv04's cases whose regime drew C a multiple of 8, those given few channels instead
STEM_SHARE = 0.5  # of conv04's cases in the layer regime, those on a stem (7x7 at stride 2 over 1-4 channels)
GROUPED_SHARE = 0.12  # of the forward cases, those grouped (conv2d's groups > 1), within the work limits
GROUP_COUNTS = (2, 3, 4, 8, 32, 64)  # the groups such a case draws from (fewer where the limits hold fewer)

# Each case's work, so that one costs about a millisecond: multiply-adds, output elements, the
# im2col matrix's elements (N*P*Q x C*R*S: im2col's copy, and the float64 reference's columns) and
# the input's.
MAX_MACS = 2 * 10**9
MAX_OUTPUT = 1 << 24
MAX_FIELDS = 1 << 25
MAX_INPUT = 1 << 24
LIMITS = (MAX_MACS, MAX_OUTPUT, MAX_FIELDS, MAX_INPUT)
# A gradient case's float64 reference runs about ten convolutions of its size where a forward
# case's runs three (the backward pass's dx and dw for the gradients, their scales and their terms'
# norms): it keeps within an eighth of each limit.
GRAD_LIMITS = tuple(v // 8 for v in LIMITS)

TILE_ROWS = (64, 128, 192, 256)  # conv03's tile heights (BM 64, 128) and their multiples
CHANNEL_EDGES = (63, 64, 65, 127, 128, 129, 191, 192, 193, 255, 256, 257)
ODD_CHANNELS = (1, 7, 130, 300)
PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83, 89, 97, 101, 127)
NOT_EIGHTS = (1, 3, 4, 6, 12, 20, 36, 100)  # channel counts conv02 and conv03 refuse (C % 8)
FEW_CHANNELS = NOT_EIGHTS + (2, 5, 7, 9, 17, 31)  # conv04's input channels beside 1-7
STEM_IMAGES = (224, 225, 223, 160, 97, 64, 33, 17, 7)  # a stem's image sides: ImageNet's, odd ones, small ones


@dataclass(frozen=True)
class ConvCase:
    """One convolution, every choice of it fixed: fuzz_conv.start(case) builds it again from these alone."""

    seed: int
    regime: str
    dtype: str  # a key of DTYPES
    N: int
    C: int
    H: int
    W: int
    K: int  # output channels
    R: int
    S: int
    stride: int | tuple
    padding: int | tuple | str  # an int, a pair, "same" or "valid", as conv2d takes it
    dilation: int | tuple
    x_channels_last: bool
    w_channels_last: bool
    algorithm: str  # what runs: "tma", "implicit", "gather", "im2col" or "depthwise" (conv05: groups = channels, C = K = 1;
    # or its grouped build's narrow groups, C = K = 2, 4 or 8)
    bias: bool = False
    activation: str | None = None
    special: str = ""  # "", or a NaN or an Inf in x or w: "nan-x", "inf-x", "nan-w", "inf-w"
    drawn: str = ""  # the algorithm first drawn, where it refused the case ("": the one that runs)
    refused: str = ""  # why it refused
    tile: tuple | None = None  # conv03's tile (BM, BN) forced through conv03.TILE; None: its rule's
    grad: bool = False  # x, w and the bias require grad: y.backward(dY) runs, and dx, dw, db are checked too
    tma_store: bool = False  # conv03's staged TMA-store epilogue forced on (conv03.TMA_STORE); False: as set
    register_store: bool = False  # conv03's register epilogue forced (conv03.TMA_STORE off); False: as set
    groups: int = 1  # C and K are one group's: x has C * groups channels, w is [K * groups, C, R, S]

    @property
    def g_args(self) -> tuple:
        return self.stride, self.padding, self.dilation

    def geometry(self) -> dict:
        """One group's geometry (the whole convolution's where groups = 1): what each step sees."""
        return conv_geometry((self.N, self.C, self.H, self.W), (self.K, self.C, self.R, self.S), *self.g_args)

    @property
    def in_channels(self) -> int:
        return self.C * self.groups

    @property
    def out_channels(self) -> int:
        return self.K * self.groups

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> "ConvCase":
        d = json.loads(text)
        return ConvCase(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def label(self) -> str:
        fmt = lambda cl: " channels_last" if cl else ""  # noqa: E731
        return (f"x={self.N}x{self.in_channels}x{self.H}x{self.W}{fmt(self.x_channels_last)} "
                f"w={self.out_channels}x{self.C}x{self.R}x{self.S}{fmt(self.w_channels_last)} stride={self.stride} "
                + (f"groups={self.groups} " if self.groups > 1 else "") +
                f"padding={self.padding!r} dilation={self.dilation} algorithm={self.algorithm} dtype={self.dtype}"
                + (" bias" if self.bias else "") + (f" activation={self.activation}" if self.activation else "")
                + (f" special={self.special}" if self.special else "")
                + (f" tile={self.tile[0]}x{self.tile[1]}" if self.tile else "") + (" tma_store" if self.tma_store else "")
                + (" register_store" if self.register_store else "")
                + (" gradients" if self.grad else "")
                + (f" (drawn {self.drawn}: {self.refused})" if self.drawn else "") + f" [{self.regime}]")  # fmt: skip

    def call(self) -> str:
        """The conv2d() call this case makes, as Python (and its backward pass, for a gradient case)."""
        args = ["x", "w"] + (["bias"] if self.bias else [])
        if self.grad:
            args = [f"{a}.requires_grad_()" for a in args]
        kw = [f"stride={self.stride!r}", f"padding={self.padding!r}", f"dilation={self.dilation!r}"]
        if self.groups > 1:
            kw.append(f"groups={self.groups}")
        if self.activation:
            kw.append(f"activation={self.activation!r}")
        call = f"gemmlab.conv2d({', '.join(args + kw + [f'algorithm={self.algorithm!r}'])})"
        call += ".backward(dy)" if self.grad else ""
        call = f"gemmlab.conv03.TMA_STORE = True; {call}" if self.tma_store else call
        call = f"gemmlab.conv03.TMA_STORE = False; {call}" if self.register_store else call
        return f"gemmlab.conv03.TILE = {self.tile!r}; {call}" if self.tile else call


# ---- Drawing cases ------------------------------------------------------------------------------


def _channels(rng: random.Random, hi: int, odd_share: float = 0.12) -> int:
    """Input channels: a multiple of 8 up to hi, or now and then a count conv02 and conv03 refuse."""
    if rng.random() < odd_share:
        return rng.choice([c for c in NOT_EIGHTS if c <= hi] or [1])
    return 8 * _log_int(rng, 1, max(1, hi // 8))


def _out_channels(rng: random.Random, hi: int = 320) -> int:
    pick = rng.random()
    if pick < 0.45:
        return rng.choice([k for k in CHANNEL_EDGES if k <= hi])
    if pick < 0.7:
        return rng.choice(ODD_CHANNELS)
    return _log_int(rng, 1, hi)


def _divisor(rng: random.Random, n: int, hi: int) -> int:
    """A divisor of n no larger than hi (1 at worst)."""
    return rng.choice([d for d in range(1, min(n, hi) + 1) if n % d == 0])


def _filter(rng: random.Random, odd: bool = False) -> tuple:
    """(R, S, stride, padding, dilation): filters 1, 3, 5, 7 (odd: also 2, 4, 6 and non-square ones,
    stride 3, dilation 2-3, asymmetric padding)."""
    sizes = (1, 2, 3, 4, 5, 6, 7) if odd else (1, 1, 3, 3, 5, 7)
    R = rng.choice(sizes)
    S = R if rng.random() < (0.5 if odd else 0.85) else rng.choice(sizes)
    dilation = rng.choice((1, 1, 2, 3, (1, 2), (2, 1), (3, 2))) if odd else rng.choice((1, 1, 1, 1, 2))
    form = rng.random()
    if form < (0.3 if odd else 0.35):
        return R, S, 1, "same", dilation
    stride = rng.choice((1, 2, 2, 3, (1, 2), (2, 1))) if odd else rng.choice((1, 1, 2))
    if form < 0.45:
        return R, S, stride, "valid", dilation
    if odd and form < 0.75:  # asymmetric: each side its own, up to past the filter's reach
        return R, S, stride, (rng.randint(0, R), rng.randint(0, S)), dilation
    return R, S, stride, rng.choice((0, R // 2, max(R, S) // 2, 1)), dilation


def _image(P: int, Q: int, R: int, S: int, stride, padding, dilation, rng: random.Random) -> tuple[int, int]:
    """H and W whose output is P x Q under this filter (or the nearest one possible where the padding
    alone is wider than the filter's reach: H, W >= 1); stride's slack drawn."""
    (sh, sw), (dh, dw) = (_pair(stride), _pair(dilation))
    if padding == "same":
        return P, Q
    ph, pw = (0, 0) if padding == "valid" else _pair(padding)
    H = (P - 1) * sh + dh * (R - 1) + 1 - 2 * ph + rng.randrange(sh)
    W = (Q - 1) * sw + dw * (S - 1) + 1 - 2 * pw + rng.randrange(sw)
    return max(1, H), max(1, W)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def _tile_edge(rng: random.Random) -> tuple:
    """Output rows a whole number of some tile width, or one either side; channels at tile edges."""
    t = rng.choice(TILE_ROWS)
    M = max(1, t * _log_int(rng, 1, 64) + rng.choice((-1, 0, 1)))
    N = _divisor(rng, M, 8)
    Q = _divisor(rng, M // N, 512)
    R, S, stride, padding, dilation = _filter(rng)
    H, W = _image(M // N // Q, Q, R, S, stride, padding, dilation, rng)
    return N, _channels(rng, 128), H, W, _out_channels(rng), R, S, stride, padding, dilation


def _short_reduction(rng: random.Random) -> tuple:
    """C*R*S of one to a few k-steps: 1x1 filters over 8-64 channels, or a 3x3 / 1x3 over 8."""
    if rng.random() < 0.7:
        R = S = 1
        C = 8 * rng.randint(1, 8)
        stride, padding, dilation = rng.choice((1, 1, 2)), rng.choice((0, 0, 1)), 1
    else:
        R, S = rng.choice(((3, 3), (1, 3), (3, 1)))
        C, stride, padding, dilation = 8, 1, "same", 1
    P, Q = _log_int(rng, 1, 160), _log_int(rng, 1, 160)
    H, W = _image(P, Q, R, S, stride, padding, dilation, rng)
    return rng.randint(1, 8), C, H, W, _out_channels(rng, 512), R, S, stride, padding, dilation


def _persistent(rng: random.Random) -> tuple:
    """Thousands of output tiles over a short reduction: each persistent block walks several."""
    R = S = rng.choice((1, 1, 3))
    C = 8 * rng.randint(1, 4) if R == 3 else 8 * rng.randint(1, 16)
    K = rng.choice((64, 64, 128, 7, 65, 130, 256))
    stride, padding = (1, "same") if rng.random() < 0.7 else (2, R // 2)
    P, Q = _log_int(rng, 40, 224), _log_int(rng, 40, 224)
    H, W = _image(P, Q, R, S, stride, padding, 1, rng)
    return rng.randint(2, 8), C, H, W, K, R, S, stride, padding, 1


def _odd_geometry(rng: random.Random) -> tuple:
    """Prime or odd images, non-square and even filters, stride 2-3, dilation, asymmetric padding."""
    R, S, stride, padding, dilation = _filter(rng, odd=True)
    H = rng.choice(PRIMES) if rng.random() < 0.6 else rng.randint(1, 60) * 2 + 1
    W = rng.choice(PRIMES) if rng.random() < 0.6 else rng.randint(1, 60) * 2 + 1
    return rng.randint(1, 8), _channels(rng, 256), H, W, _log_int(rng, 1, 320), R, S, stride, padding, dilation


def _layer(rng: random.Random) -> tuple:
    """A network's layer: 64-512 channels, 7-112 pixels, 1x1 and 3x3 at stride 1 or 2; now and
    then the stem (_stem: 7x7 at stride 2 over 1-4 channels), which conv02 and conv03 refuse."""
    if rng.random() < 0.1:
        return _stem(rng)
    C, K = rng.choice((64, 128, 256, 512)), rng.choice((64, 128, 256, 512))
    H = rng.choice((7, 14, 28, 56, 112))
    R = rng.choice((1, 3))
    return rng.randint(1, 8), C, H, H, K, R, R, rng.choice((1, 1, 2)), R // 2, 1


def _stem(rng: random.Random) -> tuple:
    """A CNN's first layer: 7x7 at stride 2, padding 3, over 3 channels (now and then 1 or 4) into
    64 (now and then 24 to 130), on ImageNet's 224 x 224 or an odd or small image."""
    C = rng.choice((3, 3, 3, 1, 4))
    K = 64 if rng.random() < 0.6 else rng.choice((24, 32, 96, 130))
    H = rng.choice(STEM_IMAGES)
    W = H if rng.random() < 0.7 else rng.choice(STEM_IMAGES)
    return rng.randint(1, 4), C, H, W, K, 7, 7, 2, 3, 1


def _few_channels(rng: random.Random, regime: str, geometry: tuple) -> tuple:
    """A regime's geometry as conv04's case takes it: in the layer regime the stem for a
    STEM_SHARE; else input channels drawn from 1-7 or FEW_CHANNELS (no larger than the regime's,
    so a short reduction stays short) where the regime's were a multiple of 8 (for a FEW_SHARE),
    and output channels within CONV04_MAX_K (K's tile edges and odd counts)."""
    if regime == "layer" and rng.random() < STEM_SHARE:
        return _stem(rng)
    N, C, H, W, K, R, S, stride, padding, dilation = geometry
    if C % 8 == 0 and rng.random() < FEW_SHARE:
        C = rng.randint(1, 7) if rng.random() < 0.6 else rng.choice([c for c in FEW_CHANNELS if c <= C])
    if K > CONV04_MAX_K:
        K = rng.choice([k for k in CHANNEL_EDGES + ODD_CHANNELS if k <= CONV04_MAX_K])
    return N, C, H, W, K, R, S, stride, padding, dilation


def _gather_fit(N, C, H, W, K, R, S, stride, padding, dilation) -> tuple:
    """A valid geometry shrunk until one of conv04's builds holds it (specs.conv.conv04_config: at
    most CONV04_MAX_ENTRIES filter entries R*S*C, its shared memory): input channels down to 7,
    then output channels down to 64, then input channels down to 1 (which always fits)."""
    while why_not("gather", "bf16", conv_geometry((N, C, H, W), (K, C, R, S), stride, padding, dilation)):
        if C > 7:
            C = max(7, C // 2)
        elif K > 64:
            K = max(64, K // 2)
        elif C > 1:
            C //= 2
        else:
            raise ValueError(f"no conv04 build holds {(N, C, H, W, K, R, S, stride, padding, dilation)}")
    return N, C, H, W, K, R, S, stride, padding, dilation


def _filter_gradient(rng: random.Random) -> tuple:
    """conv06's (gemmlab.conv_wgrad_tma): C a multiple of 64, K a multiple of 8 around its 64- and
    128-row tiles, filters past 1x1 (a 1x1 only at a stride), stride, dilation and padding, output
    pixels -- its reduction -- from a few (one partial 64-pixel K step) to thousands, within a
    gradient case's limits (every case of the regime is one: draw), so that C stays whole."""
    C = 64 * rng.choice((1, 1, 2, 3, 4))
    K = rng.choice((8, 56, 64, 72, 120, 128, 136, 200, 256, 264, 512))
    R, S = rng.choice(((3, 3), (3, 3), (1, 1), (5, 5), (7, 7), (1, 3), (3, 1), (5, 3)))
    stride = rng.choice((2, 3)) if (R, S) == (1, 1) else rng.choice((1, 1, 2, 3))
    dilation = rng.choice((1, 1, 2))
    padding = rng.choice((0, R // 2, (R // 2, S // 2), (0, S // 2)))
    macs, output, fields, input_ = GRAD_LIMITS
    most = min(macs // (K * C * R * S), fields // (C * R * S), output // K, input_ // (C * stride * stride * 4))
    N = rng.randint(1, 4)
    pq = max(1, _log_int(rng, 1, max(1, most)) // N)
    Q = _log_int(rng, 1, max(1, int(pq**0.5) * 2))
    H, W = _image(max(1, pq // Q), Q, R, S, stride, padding, dilation, rng)
    return N, C, H, W, K, R, S, stride, padding, dilation


# Each regime: (weight, what it aims at, the geometry (N, C, H, W, K, R, S, stride, padding, dilation)).
REGIMES: dict[str, tuple[float, str, Callable[[random.Random], tuple]]] = {
    "tile-edge": (0.25, "N*P*Q around multiples of 64-256 (+-1), K around 64-256 and odd", _tile_edge),
    "short-reduction": (0.2, "C*R*S of one to a few k-steps: 1x1 filters over 8-64 channels", _short_reduction),
    "persistent": (0.2, "many output tiles, a short reduction: several tiles a persistent block", _persistent),
    "odd-geometry": (0.2, "prime images, even and non-square filters, stride, dilation, asymmetric padding", _odd_geometry),
    "layer": (0.15, "a CNN's layers (64-512 channels, 1x1 and 3x3, stride 1 and 2) and its stem", _layer),
    "filter-gradient": (0.1, "conv06's filter gradients: C a multiple of 64, taps, strides, short and long reductions",
                        _filter_gradient),
}


def _fits(N: int, C: int, H: int, W: int, K: int, R: int, S: int, g: dict, limits: tuple = LIMITS) -> bool:
    macs, output, fields, input_ = limits
    rows = N * g["P"] * g["Q"]
    return (rows * K * C * R * S <= macs and rows * K <= output and rows * C * R * S <= fields
            and N * C * H * W <= input_)  # fmt: skip


def _fit(N, C, H, W, K, R, S, stride, padding, dilation, limits: tuple = LIMITS) -> tuple:
    """The geometry made valid (a filter too wide for its image loses its dilation, then shrinks to
    1x1) and shrunk into the work limits (LIMITS, or GRAD_LIMITS): channels first (the output rows
    stay at their tile edge), then the batch, then the image."""
    while True:
        try:
            g = conv_geometry((N, C, H, W), (K, C, R, S), stride, padding, dilation)
        except ValueError:
            if (R, S, dilation) == (1, 1, 1):
                raise  # (a drawing rule broke conv2d's: padding="same" with a stride)
            dilation, R, S = (1, R, S) if dilation != 1 else (1, 1, 1)
            continue
        if _fits(N, C, H, W, K, R, S, g, limits):
            return N, C, H, W, K, R, S, stride, padding, dilation
        if C > 8:
            C = max(8, C // 2 // 8 * 8) if C % 8 == 0 else max(1, C // 2)
        elif N > 1:
            N //= 2
        else:
            H, W = max(1, H * 3 // 4), max(1, W * 3 // 4)


def why_not(algorithm: str, dtype: str, g: dict, groups: int = 1) -> str | None:
    """Why an algorithm cannot serve this geometry and dtype, judged from them alone (the device is
    asked at run time): conv02, conv03 and conv04 take 16-bit inputs, conv02 and conv03 with C a
    multiple of 8, conv03 only what its im2col map can describe (gemmlab.tma.im2col_why_not, as
    conv.tma_why_not asks it), conv04 only what one of its builds holds (conv04_config's refusals,
    as conv.gather_why_not words them); conv02 over groups (one launch of its grouped build) with C
    a multiple of 4."""
    if algorithm in ("im2col", "depthwise"):  # (a depthwise case's geometry is drawn as one: draw)
        return None
    if dtype == "fp32":
        return "it takes bf16 or fp16, not float32"
    if algorithm == "gather":
        try:
            conv04_config(g)
        except ValueError as e:
            return str(e).replace(f"{CONV_04.id} ", "", 1)
        return None
    if algorithm == "implicit" and groups > 1:
        return None if g["C"] % 4 == 0 else f"its grouped build reads channels 4 at a time: C = {g['C']} a group"
    if g["C"] % 8:
        return f"it reads channels 8 at a time: C = {g['C']} is not a multiple of 8"
    if algorithm == "tma":
        return im2col_why_not(g, CONV_03.default_config()["BM"], CONV03_BK, DTYPES[dtype].itemsize)
    return None


def draw(seed: int, dtypes: tuple[str, ...] | None = None, algorithms: tuple[str, ...] | None = None,
         activation: str | None = None) -> ConvCase:  # fmt: skip
    """Case `seed`. activation: the run's (fuzz.run_activation), taken by about half the cases.
    Where the algorithm drawn refuses the geometry, the next of FALLBACK among `algorithms` runs
    (the case says which was drawn and why it refused); where none of them can, the geometry is
    drawn again from the same generator. A case drawn as conv04 (gather) takes the regime's geometry
    through _few_channels and, once inside the work limits, _gather_fit. A GRAD_SHARE of the cases
    drawn as conv02, conv03 or conv04 check their gradients too: their geometry is shrunk into
    GRAD_LIMITS, and they carry no NaN or Inf (a gradient's judging expects finite values); one that
    falls back to im2col keeps the smaller geometry and checks its forward pass alone."""
    rng = random.Random(seed)
    wants_grad = random.Random(f"gradients {seed}").random() < GRAD_SHARE  # from a generator of its own
    allowed = [a for a in ALGORITHM_WEIGHTS if algorithms is None or a in algorithms]
    wanted = [d for d in DTYPES if dtypes is None or d in dtypes]
    if not allowed or not wanted or (wanted == ["fp32"] and "im2col" not in allowed):
        raise ValueError(f"no case can be drawn: algorithms {algorithms}, dtypes {dtypes} (float32 runs on im2col only)")
    while True:
        regime = _weighted(rng, {k: w for k, (w, _, _) in REGIMES.items()})
        drawn_geo = REGIMES[regime][2](rng)
        drawn = _weighted(rng, {a: ALGORITHM_WEIGHTS[a] for a in allowed})
        if drawn == "gather":
            drawn_geo = _few_channels(rng, regime, drawn_geo)
        weights = {"bf16": 0.5, "fp16": 0.5} | ({"fp32": FP32_SHARE / (1 - FP32_SHARE)} if drawn in ("im2col", "depthwise") else {})
        dtype = _weighted(rng, {d: w for d, w in weights.items() if d in wanted} or {d: 1.0 for d in wanted})
        # within a gradient case's limits (every case of the filter-gradient regime checks its gradients)
        small = (wants_grad or regime == "filter-gradient") and drawn in GRAD_ALGORITHMS
        N, C, H, W, K, R, S, stride, padding, dilation = _fit(*drawn_geo, limits=GRAD_LIMITS if small else LIMITS)
        if drawn == "gather":
            N, C, H, W, K, R, S, stride, padding, dilation = _gather_fit(N, C, H, W, K, R, S, stride, padding, dilation)
        if drawn == "depthwise":  # one filter a channel: the regime's C channels in and out
            N, C, H, W, K, R, S, stride, padding, dilation = _fit(N, C, H, W, C, R, S, stride, padding, dilation,
                                                                  limits=GRAD_LIMITS if small else LIMITS)  # fmt: skip
        if small and K >= 8 and random.Random(f"dgrad {seed}").random() < DGRAD_ON_STEP:
            K -= K % 8  # dx's convolution reads K channels: a multiple of 8 runs it on conv02/conv03
        g = conv_geometry((N, C, H, W), (K, C, R, S), stride, padding, dilation)
        reasons = []
        for algorithm in (a for a in (drawn, *FALLBACK[drawn]) if a in allowed):
            why = why_not(algorithm, dtype, g)
            if why is None:
                break
            reasons.append(f"{algorithm}: {why}")
        else:
            continue  # none asked for serves it: another geometry
        break
    x_cl, w_cl = rng.random() < 0.5, rng.random() < 0.5
    # the epilogue and the special value from generators of their own, so that each stays apart
    erng = random.Random(f"epilogue {seed}")
    bias = erng.random() < 0.5
    act = activation if activation is not None and erng.random() < 0.5 else None
    srng = random.Random(f"special {seed}")
    special = srng.choice(("nan-x", "inf-x", "nan-w", "inf-w")) if srng.random() < SPECIAL_SHARE else ""
    grad = small and algorithm in GRAD_ALGORITHMS
    special = "" if grad else special
    trng = random.Random(f"tile {seed}")  # a share of conv03's cases on a tile its rule may not pick here
    tile = trng.choice(list(CONV03_TILES)) if algorithm == "tma" and trng.random() < TILE_SHARE else None
    staged = algorithm == "tma" and random.Random(f"staged {seed}").random() < STAGED_SHARE
    registers = algorithm == "tma" and not staged and random.Random(f"registers {seed}").random() < REGISTER_SHARE
    # grouped: forward cases, and conv02's gradient cases (its grouped build's GroupedConv), within their limits
    grouped = not grad or algorithm == "implicit"
    groups = _groups(random.Random(f"groups {seed}"), N, C, H, W, K, R, S, g, GRAD_LIMITS if grad else LIMITS) if grouped else 1
    if algorithm == "depthwise":  # every channel its own group (C and K are a group's), or narrow groups
        C, K, groups = _narrow(random.Random(f"narrow {seed}"), dtype, N, C, R, S, g, GRAD_LIMITS if grad else LIMITS)
    if algorithm == "implicit" and groups > 1 and C % 8 == 0 and random.Random(f"fours {seed}").random() < 0.5:
        C -= 4  # conv02's grouped build copies groups of 4k channels 8 bytes at a time (CH = 4)
    return ConvCase(seed, regime, dtype, N, C, H, W, K, R, S, stride, padding, dilation, x_cl, w_cl, algorithm, bias,
                    act, special, drawn if algorithm != drawn else "", "; ".join(reasons), tile, grad, staged,
                    registers, groups)  # fmt: skip


def _narrow(rng: random.Random, dtype: str, N: int, C: int, R: int, S: int, g: dict, limits: tuple) -> tuple:
    """A conv05 case's (C, K, groups), C and K a group's: one channel a group (depthwise), or for
    half of them narrow groups of 2, 4 or 8 channels and as many filters (conv05's grouped build:
    C rounded down to whole 16 bytes of channels, a group within them), fewer where the
    multiply-adds (a group's channels times the depthwise layer's) would pass the work limits."""
    vec = 4 if dtype == "fp32" else 8
    cg = rng.choice((1, 1, 1, 2, 4, 8) if vec == 8 else (1, 1, 2, 4))
    rows = N * g["P"] * g["Q"]
    while cg > 1 and (C < vec or rows * (C // vec * vec) * cg * R * S > limits[0]):
        cg //= 2
    if cg == 1:
        return 1, 1, C
    C = C // vec * vec  # (a narrow group's channels within a thread's 16 bytes)
    return cg, cg, C // cg


def _groups(rng: random.Random, N: int, C: int, H: int, W: int, K: int, R: int, S: int, g: dict,
            limits: tuple = LIMITS) -> int:  # fmt: skip
    """A case's groups: 1, or for a GROUPED_SHARE of them one of GROUP_COUNTS, at most what keeps
    the whole convolution (every group's work) within the work limits (a gradient case's, smaller)."""
    if rng.random() >= GROUPED_SHARE:
        return 1
    macs, output, fields, input_ = limits
    rows = N * g["P"] * g["Q"]
    groups = rng.choice(GROUP_COUNTS)
    while groups > 1 and not (rows * K * C * R * S * groups <= macs and rows * K * groups <= output
                              and rows * C * R * S * groups <= fields and N * C * groups * H * W <= input_):  # fmt: skip
        groups //= 2
    return groups


# ---- The GEMMs and builds a case reaches (chosen's labels and warm's jobs) ----------------------


def _im2col_problem(case: ConvCase, g: dict):
    """The GEMM problem im2col hands gemm(), on the meta device (shapes and strides only), asked as
    of the GPU's SM count where there is one."""
    from .problem import problem_from_tensors

    from .conv_im2col import _aligned_rows

    dtype, rsc = DTYPES[case.dtype], case.C * case.R * case.S
    like = torch.empty(0, dtype=dtype, device="meta")
    # the rows spaced to 16 bytes, as im2col(aligned=True) and filter_matrix(aligned=True) lay them out
    # on a GPU, except a 1x1 filter at stride 1 without padding: x's own memory, C to a row
    rows = g["N"] * g["P"] * g["Q"]
    view = case.R == case.S == 1 and g["stride"] == (1, 1) and not any(g["pads"])
    a = torch.empty(rows, rsc, dtype=dtype, device="meta") if view else _aligned_rows(rows, rsc, like)
    b = _aligned_rows(case.K, rsc, like).t()  # the filter matrix, read transposed
    return replace(problem_from_tensors(a, b, device_type="meta"), device=torch.device("cuda"))


def _gather_dgrad_config(case: ConvCase, g: dict):
    """conv04's config for a gather gradient case's dgrad convolution (conv.conv_dgrad: the spread
    dY, K channels, by the flipped filter into C), where that lands on conv04: K no multiple of 8
    (else conv03 or conv02 take it) and a build that holds it; else None."""
    from .conv_grad import dgrad_operands

    if case.K % 8 == 0:
        return None
    dy = torch.empty(g["N"], g["K"], g["P"], g["Q"], device="meta")
    z, w2, pad = dgrad_operands(dy, torch.empty(case.K, case.C, case.R, case.S, device="meta"), g)
    try:
        return conv04_config(conv_geometry(tuple(z.shape), tuple(w2.shape), 1, pad, g["dilation"]))
    except ValueError:
        return None


def _wgrad_problem(case: ConvCase, g: dict):
    """The GEMM problem conv.conv_wgrad hands gemm() for a gradient case, on the meta device:
    dY's rows read transposed, [K, N*P*Q], times im2col's matrix, [N*P*Q, R*S*C]."""
    from .problem import problem_from_tensors

    dtype, rows = DTYPES[case.dtype], g["N"] * g["P"] * g["Q"]
    a = torch.empty(rows, case.K, dtype=dtype, device="meta").t()
    b = torch.empty(rows, case.C * case.R * case.S, dtype=dtype, device="meta")
    return replace(problem_from_tensors(a, b, device_type="meta"), device=torch.device("cuda"))
