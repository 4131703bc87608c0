"""bench(): time GEMM callables by the engine's rules (docs/MEASUREMENT.md) and
write the CLI's JSON (docs/JSON.md).

Per case (one shape):
  1. operands A [M, K] and B [N, K] from the seed, the shape and the role, as
     `fp4bench run` makes them (the library's generator), quantized by the
     library; the odd copies use -A (every sign bit flipped), whose exact
     product is -R;
  2. copies for cold L2 from the least any GEMM moves per call
     (fp4_gemm_min_bytes): ceil(3 x L2 / that), at most 1024 and a quarter of
     the GPU memory; each copy its own input and output buffers; the row's
     rotation_bytes is what the copies take in device memory (the buffers, and
     what the backend's setup allocated, measured), "warm" under 3 x L2;
  3. per backend: setup (timed apart as prepare_ms), then verification before
     any timing: poison must poison (copy 0 poisoned and read back without a
     run: every element NaN/Inf), then copy 1 (against -R) and copy 0
     (against R) are poisoned, run and compared with the exact reference by
     fp4_compare_outputs at the backend's tolerances; a backend that fails is
     a FAILED row, one that raises Unsupported an unsupported row;
  4. batch = the smallest multiple of copies that is >= min_batch (64) calls
     (fewer repetitions only when a batch would pass 20 ms), call i on copy
     i % copies, captured into one torch.cuda.CUDAGraph; the capture checks
     that it used every copy;
  5. timing: warm-up by time in whole rounds, then rounds over the verified
     backends in an order shuffled every round (the engine's generator, seeded
     from order_seed and the shape), one graph replay per backend per round
     behind a stream gate (a GPU sleep holds the stream while the host
     enqueues the start event, the replay and the stop event, so the events
     time the batch, not its launch), until every backend has min_samples
     and the noise of its median is under the target (src/bench/stats.c), or
     max_time passes; NVML telemetry after every sample when available;
  6. verification after timing: every copy poisoned, the timed graph replayed
     once, every copy checked (verified_copies); a failure drops the times;
  7. ratios: per round baseline time / backend time, the median and its 95% CI.

The callables get an Operands bundle (see its docstring); device="cpu" runs
numpy callables with host timing (what the CPU tests use).
"""

from __future__ import annotations

import datetime
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np

from . import _lib
from . import format as fmt
from . import stats as st
from .report import Report, Row, default_settings, empty_ceilings, empty_device
from .shapes import Case, cases as make_cases

MAX_COPIES = 1024
MIN_BATCH = 64
MAX_SAMPLE_US = 20000.0
SPOT_CHECKS = 64
GATE_MIN_US = 50.0  # the shortest stream gate; it grows with the host's enqueue time
_M64 = (1 << 64) - 1


class Unsupported(Exception):
    """Raised by a backend (setup or run) that cannot run this shape or on this
    machine: its row says "unsupported" with the message as the reason."""


@dataclass
class Backend:
    """A contender for bench(). A plain callable f(ops) is Backend(run=f).

    run(ops):       one GEMM on the copy ops.copy; returns D [M, N] or None,
                    in which case D is ops.out. Must be capturable in a CUDA
                    graph: no host synchronisation, no allocation outside
                    torch's caching allocator.
    setup(problem): optional, once per case before verification (converting
                    operands, e.g. shuffling weights; timed as prepare_ms); its
                    result is every bundle's ops.state.
    poison(ops):    optional: write NaN where D will go (default: ops.out.fill_(nan)).
    read(ops, ret): optional: D as an array after run returned ret.
    teardown(state): optional, after the case.
    tol_max, tol_norm: verification tolerances (default: a bf16 output with
                    fp32 accumulation, 1e-2 and 5e-3).
    math:           "bf16", "fp8" or "fp4": picks the datasheet peak for % of
                    peak and the roofline's compute floor; "" for neither.
    bytes_moved(m, n, k): the bytes one call moves, for GB/s and the roofline
                    (default fp4_gemm_min_bytes: NVFP4 A and B with padded
                    swizzled scales, bf16 D); copies do not depend on it.
    variant:        a string, or variant(state) -> str, for the row's variant.
    needs_dequantized: give the bundles a_dq and b_dq (bf16 on the GPU).
    own_copies:     the backend keeps its own operand copies (set up from the
                    Problem's host matrices) and uses the bundles only for the
                    copy index: its rotation is what its setup allocated.
    out_dtype:      the dtype of ops.out ("bfloat16", "float16", "float32").
    """

    run: Callable[[Any], Any]
    setup: Optional[Callable[[Any], Any]] = None
    poison: Optional[Callable[[Any], None]] = None
    read: Optional[Callable[[Any, Any], Any]] = None
    teardown: Optional[Callable[[Any], None]] = None
    tol_max: Optional[float] = None
    tol_norm: Optional[float] = None
    math: str = ""
    bytes_moved: Optional[Callable[[int, int, int], float]] = None
    variant: Union[str, Callable[[Any], str]] = ""
    needs_dequantized: bool = True
    own_copies: bool = False
    out_dtype: str = "bfloat16"


@dataclass
class Operands:
    """What a callable gets for one copy (torch tensors on the GPU under
    device="cuda", numpy arrays under device="cpu"). Treat every input as
    read-only: the bundles of one copy share their inputs between backends.

    m, n, k:        the shape: D[m, n] = alpha * A[m, k] B[n, k]^T
    copy, sign:     the copy index; +1, or -1 for odd copies (A is -A there)
    a, b:           codes, uint8 [m, k/2] and [n, k/2] (two E2M1 a byte, even K low)
    a_scale, b_scale: swizzled block scales [roundup(rows, 128), roundup(k/16, 4)]
                    in the 128x4 layout, float8_e4m3fn (uint8 when torch has no
                    float8, and on the CPU)
    a_scale_plain, b_scale_plain: the same scales plain row-major, uint8 [rows, k/16]
    a_global, b_global: the fp32 decode scales (Python floats)
    alpha:          a_global * b_global in fp32: a 1-element float32 tensor (array)
    alpha_f:        the same as a Python float
    a_dq, b_dq:     dequantized without the global scales (exact): bf16 [m, k] and
                    [n, k] on the GPU, float32 on the CPU; D = alpha * a_dq b_dq^T.
                    None for a Backend with needs_dequantized=False
    out:            the output buffer [m, n] (bf16 by default), NaN before verification
    a_q, b_q:       the host NVFP4 objects of this copy (a_q is -A on odd copies)
    state:          what the backend's setup returned
    extra:          a dict for the backend's own per-copy data (set in setup)
    device:         "cuda" or "cpu"
    """

    m: int
    n: int
    k: int
    copy: int
    sign: float
    a: Any
    b: Any
    a_scale: Any
    b_scale: Any
    a_scale_plain: Any
    b_scale_plain: Any
    a_global: float
    b_global: float
    alpha: Any
    alpha_f: float
    a_dq: Any
    b_dq: Any
    out: Any
    a_q: fmt.NVFP4
    b_q: fmt.NVFP4
    device: str
    state: Any = None
    extra: dict = field(default_factory=dict)


@dataclass
class Problem:
    """What a backend's setup gets: the case, the host operands and its bundles.
    tuning: a library baseline may time its candidate algorithms in setup
    (the CLI's --baseline-tuning, on by default)."""

    case: Case
    a: fmt.NVFP4
    a_odd: fmt.NVFP4
    b: fmt.NVFP4
    alpha: float
    copies: int
    device: str
    operands: list[Operands]
    tuning: bool = True

    @property
    def m(self) -> int:
        return self.case.m

    @property
    def n(self) -> int:
        return self.case.n

    @property
    def k(self) -> int:
        return self.case.k


# ---- seeds and the round order: the engine's (src/bench/engine.c) --------------------------


def operand_seed(seed: int, m: int, n: int, k: int, role: int) -> int:
    """The engine's operand_seed: depends on the run seed, the shape and the role
    (0 A, 1 B, 2 spot checks, 3 reference, 7 round order)."""
    h = (seed * 0x9E3779B97F4A7C15) & _M64
    h ^= (m * 0xBF58476D1CE4E5B9) & _M64
    h ^= (n * 0x94D049BB133111EB + k) & _M64
    return (h * 31 + role) & _M64


def derive_order_seed(seed: int) -> int:
    """fp4_engine_create's order seed when none is given (never 0)."""
    return (((seed ^ 0xD1B54A32D192ED03) * 0x9E3779B97F4A7C15) & _M64) | 1


class RoundOrder:
    """The engine's xorshift64* generator and Fisher-Yates shuffle."""

    def __init__(self, x: int):
        self.x = x & _M64

    def _next(self) -> int:
        x = self.x
        x ^= x >> 12
        x ^= (x << 25) & _M64
        x ^= x >> 27
        self.x = x
        return (x * 0x2545F4914F6CDD1D) & _M64

    def shuffle(self, n: int) -> list[int]:
        order = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self._next() % (i + 1)
            order[i], order[j] = order[j], order[i]
        return order


def copies_for(l2_bytes: float, mem_bytes: float, bytes_per_call: float, hot: bool,
               gpu: bool) -> int:
    """The engine's copies_for: enough that one pass touches >= 3x L2, at most
    MAX_COPIES, and the rotation under a quarter of the memory."""
    if hot or not gpu or bytes_per_call <= 0:
        return 1
    want = math.ceil(3.0 * l2_bytes / bytes_per_call)
    cap = math.floor(mem_bytes / 4 / max(bytes_per_call, 1))
    want = min(want, cap, MAX_COPIES)
    return max(1, int(want))


def batch_for(copies: int, us_per_call: float, min_batch: int = MIN_BATCH) -> int:
    """The engine's plan_batch: the smallest multiple of copies >= min_batch
    calls, fewer repetitions only when a sample would pass MAX_SAMPLE_US."""
    min_batch = max(min_batch, 1)
    reps = (min_batch + copies - 1) // copies
    while reps > 1 and us_per_call * copies * reps > MAX_SAMPLE_US:
        reps -= 1
    return max(reps, 1) * copies


# ---- runners: where the callables run and how a sample is timed -------------------------


def _one_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return " ".join(text.split())


def _nbytes(x: Any) -> int:
    if x is None:
        return 0
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    return int(x.numel() * x.element_size())


class _Slot:
    """One backend's state while a case is measured."""

    def __init__(self, name: str, spec: Backend, case: Case):
        self.name = name
        self.spec = spec
        self.row = Row(label=case.label, m=case.m, n=case.n, k=case.k, backend=name)
        self.row.own_err = math.nan
        self.active = False
        self.done = False
        self.ops: list[Operands] = []
        self.copies = 1
        self.batch = 1
        self.state: Any = None
        self.has_state = False
        self.samples: list[float] = []
        self.index = 0        # calls made, for the host runner's copy rotation
        self.clock: list[float] = []
        self.power_sum = 0.0
        self.temp_max = 0.0
        self.mem_clock = 0.0
        self.reasons = 0
        self.power_cap = self.thermal = self.hw_slowdown = 0
        self.graph: Any = None
        self.events: Any = None
        self.gate_us = GATE_MIN_US
        self.last_out: dict[int, Any] = {}  # what the timed calls returned, per copy

    def fail(self, e: BaseException, stage: str) -> None:
        unsupported = isinstance(e, Unsupported) or \
            (isinstance(e, _lib.Fp4Error) and e.status == _lib.ERR_UNSUPPORTED)
        self.row.state = "unsupported" if unsupported else "FAILED"
        self.row.reason = _one_line(e) if unsupported else f"{stage}: {_one_line(e)}"
        self.active = False
        self.row.time_us = st.Stats()
        self.row.ratio = None
        self.samples = []

    def call(self, copy: int) -> Any:
        ret = self.spec.run(self.ops[copy])
        self.last_out[copy] = ret
        return ret


class _HostRunner:
    """numpy callables on the CPU, timed by the host clock (the engine's CPU rows)."""

    device = "cpu"
    gpu = False

    def __init__(self) -> None:
        self.l2_bytes = 0.0
        self.mem_bytes = 0.0
        self.nvml = None

    def describe(self) -> dict[str, Any]:
        d = empty_device()
        info = _lib.DeviceInfo()
        _lib.lib().fp4_device_describe(info)
        d["cpu_threads"] = int(info.cpu_threads) or d["cpu_threads"]
        d["why_absent"] = "timed on the CPU (bench device='cpu')"
        return d

    def upload(self, arr: np.ndarray, kind: str = "") -> Any:
        return arr

    def bf16(self, x32: np.ndarray) -> Any:
        return x32  # numpy has no bf16: the exact float32 values

    def alpha(self, a: float) -> Any:
        return np.array([a], dtype=np.float32)

    def empty_out(self, m: int, n: int, dtype: str) -> Any:
        return np.full((m, n), np.nan, dtype=np.float32 if dtype == "bfloat16" else dtype)

    def clone(self, x: Any) -> Any:
        return x.copy()

    def poison(self, out: Any) -> None:
        out.fill(np.nan)

    def sync(self) -> None:
        pass

    def used_bytes(self) -> float:
        return 0.0

    def to_host(self, d: Any) -> np.ndarray:
        return fmt.output_f32(d)

    def prepare_timing(self, slot: _Slot, graphs: bool, min_batch: int) -> None:
        slot.call(0)
        slot.batch = 1
        slot.row.timing = "host"

    def sample(self, slot: _Slot, graphs: bool, hot: bool) -> float:
        copy = slot.index % slot.copies
        slot.index += 1
        t0 = time.perf_counter()
        slot.call(copy)
        return (time.perf_counter() - t0) * 1e6

    def replay_once(self, slot: _Slot, graphs: bool) -> None:
        """What was timed, once more, through every copy (one pass: a host
        sample is one call)."""
        for c in range(slot.copies):
            slot.call(c)

    def release(self, slot: _Slot) -> None:
        pass

    def finish_case(self) -> None:
        pass


class _CudaRunner:
    """torch callables on the GPU: graphs of batches over rotated copies, CUDA events."""

    device = "cuda"
    gpu = True

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:
            raise RuntimeError("bench(device='cuda') needs torch with CUDA; torch is not "
                               "installed (device='cpu' times numpy callables)") from None
        if not torch.cuda.is_available():
            raise RuntimeError("bench(device='cuda') needs a CUDA GPU, and torch sees none "
                               "(device='cpu' times numpy callables)")
        self.torch = torch
        self.dev = torch.device("cuda", torch.cuda.current_device())
        props = torch.cuda.get_device_properties(self.dev)
        self.props = props
        self.l2_bytes = float(getattr(props, "L2_cache_size", 0) or 0)
        self.mem_bytes = float(props.total_memory)
        self.sm_mhz = 2000.0  # for the gate's sleep; the device's maximum when known
        self.flush = None
        self.nvml = None
        self.nvml_why = ""
        self.has_sleep = hasattr(torch.cuda, "_sleep")
        from . import _nvml

        bus = None
        if all(hasattr(props, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
            bus = f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        elif os.environ.get("CUDA_VISIBLE_DEVICES") is not None or self.dev.index != 0:
            self.nvml_why = "cannot map the CUDA device to NVML"
        if not self.nvml_why:
            self.nvml, self.nvml_why = _nvml.Nvml.open(bus)

    def describe(self) -> dict[str, Any]:
        torch = self.torch
        d = empty_device()
        info = _lib.DeviceInfo()
        _lib.lib().fp4_device_describe(info)
        p = self.props
        d.update(present=True, why_absent="", name=p.name, cc_major=p.major, cc_minor=p.minor,
                 sms=p.multi_processor_count, l2_bytes=self.l2_bytes, mem_bytes=self.mem_bytes,
                 cpu_threads=int(info.cpu_threads) or d["cpu_threads"])
        if info.present and info.name.decode(errors="replace") == p.name:
            for key in ("driver_version", "sm_clock_max_mhz", "mem_clock_max_mhz",
                        "peak_bf16_tflops", "peak_fp8_tflops", "peak_fp4_tflops",
                        "peak_bw_gbps"):
                d[key] = getattr(info, key)
            if not self.l2_bytes:
                self.l2_bytes = d["l2_bytes"] = float(info.l2_bytes)
        else:
            peaks = getattr(_lib.lib(), "fp4_datasheet_peaks", None)
            if peaks is not None:  # the library's table, where it exports it
                peaks.restype = None
                peaks.argtypes = [_lib.c_char_p, _lib.POINTER(_lib.DeviceInfo)]
                peaks(p.name.encode(), info)
                for key in ("peak_bf16_tflops", "peak_fp8_tflops", "peak_fp4_tflops",
                            "peak_bw_gbps"):
                    d[key] = getattr(info, key)
        if d["sm_clock_max_mhz"]:
            self.sm_mhz = float(d["sm_clock_max_mhz"])
        ver = (torch.version.cuda or "0.0").split(".")
        d["runtime_version"] = int(ver[0]) * 1000 + int(ver[1]) * 10 if len(ver) > 1 else 0
        d["nvml"] = self.nvml is not None
        d["driver_string"] = self.nvml.driver if self.nvml else self.nvml_why
        if not self.l2_bytes:
            raise RuntimeError("cannot tell this GPU's L2 size (torch lacks L2_cache_size and "
                               "the library reports no GPU): cold-L2 copies need it")
        return d

    def upload(self, arr: np.ndarray, kind: str = "") -> Any:
        t = self.torch.from_numpy(np.ascontiguousarray(arr)).to(self.dev)
        if kind == "e4m3" and hasattr(self.torch, "float8_e4m3fn"):
            t = t.view(self.torch.float8_e4m3fn)
        return t

    def bf16(self, x32: np.ndarray) -> Any:
        bits = fmt.f32_to_bf16(x32).view(np.int16)
        return self.torch.from_numpy(bits).to(self.dev).view(self.torch.bfloat16)

    def alpha(self, a: float) -> Any:
        return self.torch.tensor([a], dtype=self.torch.float32, device=self.dev)

    def empty_out(self, m: int, n: int, dtype: str) -> Any:
        return self.torch.full((m, n), float("nan"), dtype=getattr(self.torch, dtype),
                               device=self.dev)

    def clone(self, x: Any) -> Any:
        return x.clone()

    def poison(self, out: Any) -> None:
        out.fill_(float("nan"))

    def sync(self) -> None:
        self.torch.cuda.synchronize()

    def used_bytes(self) -> float:
        """Device memory in use (cudaMemGetInfo: torch's pool and the library's own)."""
        try:
            free, total = self.torch.cuda.mem_get_info(self.dev)
        except Exception:
            return 0.0
        return float(total - free)

    def to_host(self, d: Any) -> np.ndarray:
        if isinstance(d, np.ndarray):
            return fmt.output_f32(d)
        return d.detach().to(self.torch.float32).cpu().numpy()

    def _events(self, slot: _Slot) -> Any:
        if slot.events is None:
            E = self.torch.cuda.Event
            slot.events = (E(enable_timing=True), E(enable_timing=True))
        return slot.events

    def _flush_l2(self) -> None:
        """Read a 2x L2 buffer with ordinary loads: L2 then holds clean lines (a
        memset would leave dirty ones whose write-back falls into the timed calls)."""
        if self.flush is None:
            self.flush = self.torch.ones(int(2 * self.l2_bytes) // 4, dtype=self.torch.int32,
                                         device=self.dev)
        self.flush.max()

    def time_launches(self, slot: _Slot, count: int, flush: bool) -> float:
        """count plain calls cycling through the copies, us per call."""
        e0, e1 = self._events(slot)
        if flush:
            self._flush_l2()
        e0.record()
        for i in range(count):
            slot.call(i % slot.copies)
        e1.record()
        e1.synchronize()
        return e0.elapsed_time(e1) * 1e3 / count

    def prepare_timing(self, slot: _Slot, graphs: bool, min_batch: int) -> None:
        torch = self.torch
        self.time_launches(slot, slot.copies, False)  # first touch
        us = self.time_launches(slot, slot.copies, False)
        slot.batch = batch_for(slot.copies, us, min_batch)
        if not graphs:
            slot.row.timing = "launch"
            return
        # warm-up on a side stream before capture, as torch asks
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in range(min(slot.copies, 2)):
                slot.call(c)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        used = set()
        slot.last_out = {}
        try:  # as the engine captures: only this thread's unsafe calls break it
            ctx = torch.cuda.graph(g, capture_error_mode="thread_local")
        except TypeError:
            ctx = torch.cuda.graph(g)
        with ctx:
            for i in range(slot.batch):
                c = i % slot.copies
                used.add(c)
                slot.call(c)  # keeps each copy's last output: checked after timing
        if len(used) != slot.copies:  # the FlashInfer #4468 trap, checked
            raise RuntimeError(f"batch used {len(used)} of {slot.copies} copies")
        slot.graph = g
        slot.row.timing = "graph"

    def sample(self, slot: _Slot, graphs: bool, hot: bool) -> float:
        if not graphs:
            return self.time_launches(slot, slot.batch, not hot)
        e0, e1 = self._events(slot)
        if self.has_sleep:
            # the stream gate: the GPU sleeps while the host enqueues the start
            # event, the replay and the stop event, so that the events time the
            # batch alone; the sleep grows to 4x the enqueue time it must cover
            self.torch.cuda._sleep(int(slot.gate_us * self.sm_mhz))
        t0 = time.perf_counter()
        e0.record()
        slot.graph.replay()
        e1.record()
        enqueue_us = (time.perf_counter() - t0) * 1e6
        e1.synchronize()
        if enqueue_us > 0.5 * slot.gate_us:
            slot.gate_us = max(GATE_MIN_US, 4.0 * enqueue_us)
        return e0.elapsed_time(e1) * 1e3 / slot.batch

    def replay_once(self, slot: _Slot, graphs: bool) -> None:
        """What was timed, once more: the graph, or one batch of launches."""
        if graphs and slot.graph is not None:
            slot.graph.replay()
        else:
            slot.last_out = {}
            for i in range(slot.batch):
                slot.call(i % slot.copies)

    def release(self, slot: _Slot) -> None:
        slot.last_out = {}
        if slot.graph is not None:
            try:
                slot.graph.reset()
            except Exception:
                pass
            slot.graph = None

    def finish_case(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


# ---- bench() -------------------------------------------------------------------------------


def _as_backend(x: Union[Backend, Callable[[Any], Any], Any]) -> Backend:
    if isinstance(x, Backend):
        return x
    if hasattr(x, "backend") and callable(x.backend):  # a LibraryBackend
        return x.backend()
    if callable(x):
        return Backend(run=x)
    raise TypeError(f"a backend is a callable or a fp4bench.Backend, not {type(x).__name__}")


def _now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _version() -> str:
    from . import __version__

    return __version__


def _fill_metrics(row: Row, spec: Backend, dev: dict[str, Any], gpu: bool) -> None:
    """The engine's fill_metrics, with no measured ceilings (datasheet bandwidth)."""
    m, n, k = row.m, row.n, row.k
    row.flops = 2.0 * m * n * k
    row.bytes = spec.bytes_moved(m, n, k) if spec.bytes_moved else \
        float(_lib.lib().fp4_gemm_min_bytes(m, n, k))
    row.pct_peak = -1.0
    row.pct_roofline = -1.0
    med = row.time_us.median
    if not (med > 0):
        return
    row.tflops = row.flops / (med * 1e-6) / 1e12
    row.gbps = row.bytes / (med * 1e-6) / 1e9
    bw = float(dev.get("peak_bw_gbps") or 0)
    peak = {"bf16": dev.get("peak_bf16_tflops"), "fp8": dev.get("peak_fp8_tflops"),
            "fp4": dev.get("peak_fp4_tflops")}.get(spec.math) or 0.0
    rate = peak if spec.math == "fp4" else 0.0  # bf16/fp8 rates are measured ceilings
    if gpu and bw > 0:
        floor_bw = row.bytes / (bw * 1e9) * 1e6
        floor_fl = row.flops / (rate * 1e12) * 1e6 if rate > 0 else 0.0
        row.floor_us = max(floor_bw, floor_fl)
        row.pct_roofline = 100.0 * row.floor_us / med
    if peak > 0:
        row.pct_peak = 100.0 * row.tflops / peak


def bench(backends: Mapping[str, Any], shapes: Union[None, str, Sequence[Any]] = None, *,
          preset: Optional[str] = None, baseline: Optional[str] = None, seed: int = 1,
          data: str = "gaussian", hot: bool = False, graphs: bool = True,
          warmup_ms: float = 200.0, min_samples: int = 10, noise: float = 0.005,
          min_time: float = 0.0, max_time: Optional[float] = None, order_seed: int = 0,
          min_batch: int = MIN_BATCH, baseline_tuning: bool = True, samples: bool = False,
          json: Optional[str] = None, device: str = "cuda", copies: Optional[int] = None,
          progress: bool = True) -> Report:
    """Verify, then time, every backend on every shape, interleaved in rounds.

    backends: {name: callable or Backend or LibraryBackend}; names as in the
        CLI (at most 47 bytes, no spaces or commas); each row is (shape, name).
    shapes: [(M, N, K) or (M, N, K, label) or "MxNxK", ...] or "MxNxK,..."; or
        preset="seed" (any preset of `fp4bench list`); neither: the seed preset.
    baseline: the backend the ratios are against (default: the first one).
    seed, data: the operands (gaussian, codes, outliers, and whatever kinds the
        library knows), as `--seed`, `--data`; order_seed: the round order's
        seed (0: derived from seed, as the CLI does).
    hot: one copy, L2-resident (`--hot`); graphs=False: plain launches, the L2
        cleared before each sample (`--no-graphs`).
    warmup_ms, min_samples, noise, min_time, max_time, min_batch: the engine's
        rules (max_time default 10 s on the GPU, 3 s on the CPU).
    baseline_tuning: library baselines (LibraryBackend) may time their
        candidate algorithms in setup, as `--baseline-tuning` (default on).
    samples: keep every sample in the JSON; json: write the report there
        (rewritten after every case); device: "cuda" (torch callables) or
        "cpu" (numpy callables, host timing); copies: force the number of
        operand copies (tests); progress: one line per row on stderr.
    Returns the Report (report.table() prints it). Ctrl-C stops between
    samples: the JSON is written with what was measured ("interrupted") and
    KeyboardInterrupt is raised again, the report in its .report attribute."""
    if not backends:
        raise ValueError("bench() needs at least one backend")
    specs = {str(name): _as_backend(b) for name, b in backends.items()}
    for name in specs:
        try:
            b = name.encode()
        except UnicodeEncodeError:
            raise ValueError(f"backend name {name!r} is not valid UTF-8 text") from None
        if not b or len(b) >= _lib.NAME_LEN or any(c in name for c in " \t\n,\0"):
            raise ValueError(f"backend name {name!r}: 1 to {_lib.NAME_LEN - 1} bytes, "
                             "no spaces, commas or NUL")
    fmt.data_kind(data)  # a ValueError for an unknown kind, before anything runs
    if baseline is None and len(specs) > 1:
        baseline = next(iter(specs))
    if baseline is not None and baseline not in specs:
        raise ValueError(f"baseline {baseline!r} is not one of the backends")
    case_list = make_cases(shapes, preset)
    if json:  # before anything runs, as `fp4bench run --json` fails at once
        folder = os.path.dirname(os.path.realpath(json)) or "."
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
            raise OSError(f"cannot create {json}: its folder {folder} is missing or not writable")
    if device == "cuda":
        runner: Union[_HostRunner, _CudaRunner] = _CudaRunner()
    elif device == "cpu":
        runner = _HostRunner()
    else:
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    if max_time is None:
        max_time = 10.0 if runner.gpu else 3.0
    rule = st.StopRule(int(min_samples), float(noise), float(min_time), float(max_time))
    seed &= _M64
    oseed = (order_seed & _M64) or derive_order_seed(seed)

    rep = Report(version=_version(), commit=os.environ.get("FP4_COMMIT", "unknown"),
                 started=_now_iso(), host=socket.gethostname(),
                 command=" ".join(["python"] + sys.argv))
    rep.device = runner.describe()
    rep.ceilings = empty_ceilings()
    s = default_settings()
    s.update(seed=seed, data=data, hot=bool(hot), use_graphs=bool(graphs),
             warmup_ms=float(warmup_ms), min_samples=rule.min_samples,
             noise_target=rule.noise_target, min_time_s=rule.min_time_s,
             max_time_s=rule.max_time_s, baseline=baseline, keep_samples=bool(samples),
             order_seed=oseed, baseline_tuning=bool(baseline_tuning), min_batch=int(min_batch))
    rep.settings = s
    opts = _Opts(rule, seed, oseed, data, bool(hot), bool(graphs), float(warmup_ms), copies,
                 baseline, int(min_batch), bool(baseline_tuning))
    if progress:
        where = rep.device["name"] if rep.device["present"] else "CPU (host timing)"
        print(f"fp4bench {rep.version}: {where}, library {_lib.lib_path()}", file=sys.stderr)
    try:
        for case in case_list:
            rows = _run_case(case, specs, runner, rep, opts)
            rep.rows.extend(rows)
            if json:
                rep.write_json(json)
            if progress:
                for r in rows:
                    print(_progress_line(r), file=sys.stderr)
    except KeyboardInterrupt as e:
        rep.interrupted = True
        rep.rows.extend(opts.partial)
        if json:
            rep.write_json(json)
        e.report = rep  # type: ignore[attr-defined]
        raise
    finally:
        if runner.nvml is not None:
            runner.nvml.close()
    return rep


@dataclass
class _Opts:
    rule: st.StopRule
    seed: int
    oseed: int
    data: str
    hot: bool
    graphs: bool
    warmup_ms: float
    force_copies: Optional[int]
    baseline: Optional[str]
    min_batch: int
    tuning: bool
    partial: list[Row] = field(default_factory=list)  # the rows of a case cut short


def _progress_line(r: Row) -> str:
    head = f"{r.label} {r.m}x{r.n}x{r.k} {r.backend}:"
    if r.state != "ok":
        return f"{head} {r.state} ({r.reason})"
    ratio = "" if r.ratio is None else f", {r.ratio[0]:.3f}x [{r.ratio[1]:.3f}, {r.ratio[2]:.3f}]"
    flag = " (time limit)" if r.timed_out else ""
    return (f"{head} {r.time_us.median:.3f} us, noise {100 * r.time_us.noise:.2f}%, "
            f"{r.time_us.count} samples, {r.copies} copies, batch {r.batch}, "
            f"L2 {r.l2}{ratio}, verified {r.verify_note}{flag}")


def _bundles(a: fmt.NVFP4, a_odd: fmt.NVFP4, b: fmt.NVFP4, ncopies: int, dq_copies: int,
             runner: Any) -> list[dict[str, Any]]:
    """The inputs of every copy (each copy its own buffers), shared by the backends."""
    up_a = {+1: runner.upload(a.codes), -1: runner.upload(a_odd.codes)}
    a_sw = runner.upload(a.scales_swizzled, "e4m3")
    a_pl = runner.upload(a.scales)
    b_c = runner.upload(b.codes)
    b_sw = runner.upload(b.scales_swizzled, "e4m3")
    b_pl = runner.upload(b.scales)
    adq = bdq = None
    if dq_copies:
        a32 = a.dequantize(with_global_scale=False)
        adq = {+1: runner.bf16(a32), -1: runner.bf16(-a32)}
        bdq = runner.bf16(b.dequantize(with_global_scale=False))
    alpha = float(np.float32(a.global_scale) * np.float32(b.global_scale))
    out = []
    for c in range(ncopies):
        sign = -1 if (c & 1) else +1
        dq = adq is not None and c < dq_copies
        out.append({
            "a": runner.clone(up_a[sign]), "a_scale": runner.clone(a_sw),
            "a_scale_plain": runner.clone(a_pl), "b": runner.clone(b_c),
            "b_scale": runner.clone(b_sw), "b_scale_plain": runner.clone(b_pl),
            "alpha": runner.alpha(alpha), "sign": float(sign),
            "a_dq": runner.clone(adq[sign]) if dq else None,
            "b_dq": runner.clone(bdq) if dq else None,
            "a_q": a if sign > 0 else a_odd,
        })
    return out


def _input_bytes(x: dict[str, Any], with_dq: bool) -> int:
    keys = ["a", "a_scale", "a_scale_plain", "b", "b_scale", "b_scale_plain", "alpha"]
    if with_dq:
        keys += ["a_dq", "b_dq"]
    return sum(_nbytes(x[k]) for k in keys)


def _run_case(case: Case, specs: dict[str, Backend], runner: Any, rep: Report,
              o: _Opts) -> list[Row]:
    m, n, k = case.m, case.n, case.k
    a = fmt.make_operand(o.data, m, k, operand_seed(o.seed, m, n, k, 0))
    b = fmt.make_operand(o.data, n, k, operand_seed(o.seed, m, n, k, 1))
    a_odd = a.negated()
    alpha = float(np.float32(a.global_scale) * np.float32(b.global_scale))
    slots = [_Slot(name, spec, case) for name, spec in specs.items()]

    # copies from the least a GEMM moves per call, capped by a quarter of the
    # memory for what each copy takes here
    min_bytes = float(_lib.lib().fp4_gemm_min_bytes(m, n, k))
    ncopies = o.force_copies or copies_for(runner.l2_bytes, runner.mem_bytes, min_bytes, o.hot,
                                           runner.gpu)
    if runner.gpu and not o.force_copies:
        per_copy = (a.codes.nbytes + b.codes.nbytes + a.scales_swizzled.nbytes +
                    b.scales_swizzled.nbytes + a.scales.nbytes + b.scales.nbytes + 4 * m * n +
                    (2 * (m + n) * k if any(s.spec.needs_dequantized for s in slots) else 0))
        ncopies = max(1, min(ncopies, math.floor(runner.mem_bytes / 4 / per_copy)))
    dq = any(s.spec.needs_dequantized for s in slots)
    shared = _bundles(a, a_odd, b, ncopies, ncopies if dq else 0, runner)

    reference: Optional[np.ndarray] = None
    oracle = ""

    def ref() -> np.ndarray:
        nonlocal reference, oracle
        if reference is None:
            reference, oracle = _reference(a, b, runner, operand_seed(o.seed, m, n, k, 3))
        return reference

    for s in slots:
        spec = s.spec
        s.copies = ncopies
        s.row.copies = ncopies
        s.row.l2 = "n/a" if not runner.gpu else "hot" if o.hot else "cold"
        s.ops = []
        for c in range(ncopies):
            x = shared[c]
            s.ops.append(Operands(
                m=m, n=n, k=k, copy=c, sign=x["sign"], a=x["a"], b=x["b"],
                a_scale=x["a_scale"], b_scale=x["b_scale"], a_scale_plain=x["a_scale_plain"],
                b_scale_plain=x["b_scale_plain"], a_global=a.global_scale,
                b_global=b.global_scale, alpha=x["alpha"], alpha_f=alpha,
                a_dq=x["a_dq"] if spec.needs_dequantized else None,
                b_dq=x["b_dq"] if spec.needs_dequantized else None,
                out=runner.empty_out(m, n, spec.out_dtype), a_q=x["a_q"], b_q=b,
                device=runner.device))
        used0 = runner.used_bytes()
        t0 = time.perf_counter()
        try:
            if spec.setup is not None:
                problem = Problem(case, a, a_odd, b, alpha, ncopies, runner.device, s.ops,
                                  o.tuning)
                s.state = spec.setup(problem)
                s.has_state = True
                for op in s.ops:
                    op.state = s.state
            runner.sync()
        except Exception as e:  # a setup that raised: unsupported or FAILED row
            s.row.prepare_ms = (time.perf_counter() - t0) * 1e3
            s.fail(e, "prepare")
            continue
        s.row.prepare_ms = (time.perf_counter() - t0) * 1e3
        # the rotation: what the copies take (measured for what setup added)
        allocated = max(0.0, runner.used_bytes() - used0)
        if runner.gpu and not o.hot:
            own = 0 if spec.own_copies else sum(
                _input_bytes(shared[c], spec.needs_dequantized) + _nbytes(s.ops[c].out)
                for c in range(ncopies))
            s.row.rotation_bytes = own + allocated
            if s.row.rotation_bytes < 3.0 * runner.l2_bytes:
                s.row.l2 = "warm"
        v = spec.variant
        try:
            s.row.variant = v(s.state) if callable(v) else str(v)
        except Exception:
            s.row.variant = ""
        s.active = True
        try:
            r = ref()
            _check_poison(s, runner)
            for c in ([1] if ncopies > 1 else []) + [0]:  # copy 1 (-R) first, copy 0 last
                _poison(s, runner, c)
                ret = spec.run(s.ops[c])
                runner.sync()
                _check_copy(s, runner, c, ret, r)
            s.row.verify_note += f" vs {oracle}"
        except Exception as e:
            s.fail(e, "verification")

    # time the verified ones together, then verify what was timed
    try:
        for s in slots:
            if not s.active:
                continue
            try:
                runner.prepare_timing(s, o.graphs, o.min_batch)
                s.row.batch = s.batch
            except Exception as e:
                s.fail(e, "timing setup")
        warm_clock = 0.0
        if any(s.active for s in slots):
            warm_clock = _time_slots(slots, runner, o, case)
            for s in slots:
                if s.active:
                    try:
                        _verify_after_timing(s, runner, o.graphs, ref())
                        s.row.verify_note += f" vs {oracle}"
                    except Exception as e:
                        s.fail(e, "verification after timing")
    except KeyboardInterrupt:
        # as the engine: a row stopped before its first sample is left out (it
        # would read as a result); one with samples keeps them and its ratio
        base = next((s for s in slots if s.name == o.baseline and s.active and s.samples), None)
        o.partial = []
        for s in slots:
            if s.active and not s.samples:
                continue
            s.row.interrupted = s.active or s.row.interrupted
            if s.active:
                s.row.time_us = st.compute(s.samples)
                _fill_metrics(s.row, s.spec, rep.device, runner.gpu)
                if base is s:
                    s.row.ratio = (1.0, 1.0, 1.0)
                elif base is not None:
                    s.row.ratio = st.paired_ratio(base.samples, s.samples)
            s.row.samples_us = list(s.samples)
            o.partial.append(s.row)
        raise

    base = next((s for s in slots if s.name == o.baseline), None)
    for s in slots:
        if not s.active:
            continue
        _fill_metrics(s.row, s.spec, rep.device, runner.gpu)
        _fill_telemetry(s, warm_clock)
        if base is not None and base is not s and base.active:
            s.row.ratio = st.paired_ratio(base.samples, s.samples)
        if base is s:
            s.row.ratio = (1.0, 1.0, 1.0)
    rows = []
    for s in slots:
        s.row.samples_us = list(s.samples)
        rows.append(s.row)
        runner.release(s)
        if s.has_state and s.spec.teardown is not None:
            try:
                s.spec.teardown(s.state)
            except Exception:
                pass
        s.ops = []
    shared.clear()
    runner.finish_case()
    return rows


def _reference(a: fmt.NVFP4, b: fmt.NVFP4, runner: Any, spot_seed: int) -> tuple[np.ndarray, str]:
    """R exactly: the library's cuda-ref on a GPU (spot-checked against the naive
    loop, as the engine does), else the CPU reference."""
    if runner.gpu and _lib.lib().fp4_backend_find(b"cuda-ref"):
        from .libbackend import LibraryBackend

        try:
            be = LibraryBackend("cuda-ref")
            plan = be.prepare(a, b, 1)
            try:
                stream = int(runner.torch.cuda.current_stream().cuda_stream)
                plan.poison(0, stream)
                plan.run(0, stream)
                runner.torch.cuda.current_stream().synchronize()
                r = plan.read_output(0)
            finally:
                plan.release()
                be.close()
            rng = np.random.default_rng(spot_seed)
            rows = rng.integers(0, a.rows, SPOT_CHECKS)
            cols = rng.integers(0, b.rows, SPOT_CHECKS)
            exact = True
            for i, j in zip(rows, cols):
                want = fmt.naive_element(a, b, int(i), int(j))
                exact &= abs(float(r[i, j]) - want) <= 1e-6 * abs(want) + 1e-30
            if np.isfinite(r).all() and exact:
                return r, "cuda-ref"
        except _lib.Fp4Error:
            pass
    return fmt.reference_gemm(a, b), "cpu-ref"


def _poison(s: _Slot, runner: Any, c: int) -> None:
    ops = s.ops[c]
    if s.spec.poison is not None:
        s.spec.poison(ops)
    else:
        runner.poison(ops.out)
        ret = s.last_out.get(c)
        if ret is not None and ret is not ops.out and not isinstance(ret, np.ndarray):
            runner.poison(ret)  # a tensor the captured graph writes


def _output(s: _Slot, runner: Any, c: int, ret: Any) -> np.ndarray:
    ops = s.ops[c]
    d = s.spec.read(ops, ret) if s.spec.read is not None else (ret if ret is not None else ops.out)
    d32 = runner.to_host(d)
    if d32.shape != (s.row.m, s.row.n):
        raise RuntimeError(f"copy {c}: the output is {list(d32.shape)}, expected "
                           f"[{s.row.m}, {s.row.n}]")
    return d32


def _check_poison(s: _Slot, runner: Any) -> None:
    """poison() must poison: copy 0 poisoned and read back before any run."""
    s.last_out = {}
    _poison(s, runner, 0)
    runner.sync()
    d = _output(s, runner, 0, None)
    finite = int(np.isfinite(d).sum())
    if finite:
        raise RuntimeError(f"poison() left {finite} of {d.size} output elements finite (read "
                           "back before any run)")


def _check_copy(s: _Slot, runner: Any, c: int, ret: Any, r: np.ndarray) -> None:
    """Copy c's output against R (copy 0, even copies) or -R (odd copies)."""
    spec = s.spec
    d = _output(s, runner, c, ret)
    if s.ops[c].sign < 0:
        d = -d
    tm = fmt.BF16_TOL_MAX if spec.tol_max is None else spec.tol_max
    tn = fmt.BF16_TOL_NORM if spec.tol_norm is None else spec.tol_norm
    v = fmt.compare(d, r, tm, tn)
    s.row.err_max, s.row.err_norm = v.err_max, v.err_norm
    s.row.verified = int(v.passed)
    s.row.verify_note = v.why
    if not v.passed:
        which = " (an odd copy: A is -A there, the result must be -R)" if s.ops[c].sign < 0 else ""
        raise RuntimeError(f"copy {c}: {v.why}{which}")


def _verify_after_timing(s: _Slot, runner: Any, graphs: bool, r: np.ndarray) -> None:
    """Every copy poisoned, what was timed replayed once, every copy checked
    (copy 0 last: its verdict is the row's)."""
    for c in range(s.copies):
        _poison(s, runner, c)
    runner.replay_once(s, graphs)
    runner.sync()
    for c in range(s.copies - 1, -1, -1):
        _check_copy(s, runner, c, s.last_out.get(c), r)
    s.row.verified_copies = s.copies


def _telemetry(s: _Slot, runner: Any) -> None:
    if runner.nvml is None:
        return
    t = runner.nvml.read()
    if t is None:
        return
    s.clock.append(t.sm_mhz)
    s.power_sum += t.power_w
    s.temp_max = max(s.temp_max, t.temp_c)
    s.mem_clock = t.mem_mhz
    s.reasons |= t.reasons
    # NVML's clocks-event reasons: 0x4 software power cap, 0x80 hardware power
    # brake; 0x20 software, 0x40 hardware thermal; 0x8 hardware slowdown
    s.power_cap += (t.reasons & 0x84) != 0
    s.thermal += (t.reasons & 0x60) != 0
    s.hw_slowdown += (t.reasons & 0x8) != 0


def _fill_telemetry(s: _Slot, warm_clock: float) -> None:
    if not s.clock:
        return
    cs = st.compute(s.clock)
    s.row.telemetry = {
        "sm_clock_mhz": cs.median, "sm_clock_min_mhz": cs.min, "mem_clock_mhz": s.mem_clock,
        "power_w": s.power_sum / len(s.clock), "temp_c": s.temp_max,
        "throttle_reasons": s.reasons,
        "low_clock_samples": sum(1 for c in s.clock if warm_clock > 0 and c < 0.9 * warm_clock),
        "samples": len(s.clock), "power_cap_samples": s.power_cap,
        "thermal_samples": s.thermal, "hw_slowdown_samples": s.hw_slowdown,
    }


def _time_slots(slots: list[_Slot], runner: Any, o: _Opts, case: Case) -> float:
    """The engine's time_slots: warm-up rounds by time, then shuffled rounds
    until every active slot meets the stopping rule or the time limit.
    Returns the SM clock at the end of the warm-up (0 without NVML)."""
    rule = o.rule
    order_gen = RoundOrder(operand_seed(o.oseed, case.m, case.n, case.k, 7) | 1)
    ns = len(slots)
    t0 = time.perf_counter()
    while True:  # warm-up: whole rounds until warmup_ms, at least one
        any_active = False
        for i in order_gen.shuffle(ns):
            s = slots[i]
            if not s.active:
                continue
            any_active = True
            try:
                runner.sample(s, o.graphs, o.hot)
            except Exception as e:
                s.fail(e, "warm-up")
        if not (any_active and (time.perf_counter() - t0) * 1e3 < o.warmup_ms):
            break
    warm_clock = 0.0
    if runner.nvml is not None:
        t = runner.nvml.read()
        warm_clock = t.sm_mhz if t else 0.0

    t0 = time.perf_counter()
    while True:
        running = False
        for i in order_gen.shuffle(ns):
            s = slots[i]
            if not s.active:
                continue
            try:
                us = runner.sample(s, o.graphs, o.hot)
            except Exception as e:
                s.fail(e, "timing")
                continue
            s.samples.append(us)
            _telemetry(s, runner)
            n = len(s.samples)
            # the stats sort every sample: recomputed on a geometric schedule
            if n > 32 and n % (n // 16) != 0 and time.perf_counter() - t0 < rule.max_time_s:
                running |= not s.done
                continue
            s.row.time_us = st.compute(s.samples)
            s.done, s.row.timed_out = st.should_stop(rule, s.row.time_us,
                                                      time.perf_counter() - t0)
            if not s.done:
                running = True
        if not running:
            break
        # the slowest slot decides; a slot that met its rule keeps sampling so
        # that the per-round ratios stay paired
        if time.perf_counter() - t0 >= rule.max_time_s:
            for s in slots:
                if s.active and not s.done:
                    s.row.timed_out = True
            break
    for s in slots:
        if s.active:
            s.row.time_us = st.compute(s.samples)
    return warm_clock


__all__ = ["bench", "Backend", "Operands", "Problem", "Unsupported", "operand_seed",
           "derive_order_seed", "RoundOrder", "copies_for", "batch_for"]
