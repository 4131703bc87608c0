"""The results of a run in the CLI's JSON schema (docs/JSON.md, schema 1), so
that `fp4bench compare` and `fp4bench report` read what bench() writes.

Writing follows src/report/json.c: non-finite numbers are null, doubles the
shortest text that reads back exactly (Python's repr), 64-bit seeds a number
up to 2^53 - 1 and a decimal string above, strings valid UTF-8 and no longer
than the C reader's fields, the file written as the CLI writes files (a
temporary beside it, synced and renamed over it; devices and FIFOs written
straight into). Reading accepts what the C reader accepts and ignores unknown
fields; null reads as NaN.
"""

from __future__ import annotations

import json
import math
import os
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any, Optional

from .stats import Stats

SCHEMA_VERSION = 1
MAX_EXACT_INT = (1 << 53) - 1

# The C reader's field sizes (bytes with the NUL): longer strings are refused.
_CAP = {
    "label": 64, "backend": 48, "variant": 192, "reason": 384, "verify_note": 192,
    "l2": 8, "timing": 16, "version": 32, "commit": 48, "started": 40, "host": 64,
    "command": 4096, "name": 128, "why_absent": 384, "driver_string": 64, "baseline": 48,
}


def _cut(s: str, key: str) -> str:
    """s as valid UTF-8 of at most the C field's length (cut at a character)."""
    b = s.encode("utf-8", "replace")
    cap = _CAP.get(key, 1 << 20) - 1
    if len(b) > cap:
        b = b[:cap]
        while b and (b[-1] & 0xC0) == 0x80:  # drop a cut multi-byte character
            b = b[:-1]
        if b and b[-1] >= 0xC0:
            b = b[:-1]
    return b.decode("utf-8", "replace")


def _num(v: Any) -> Any:
    """A JSON number: null when not finite; ints stay ints."""
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    f = float(v)
    return f if math.isfinite(f) else None


def _u64(v: int) -> Any:
    return int(v) if 0 <= int(v) <= MAX_EXACT_INT else str(int(v))


@dataclass
class Row:
    """One (case, backend) result: the fields of docs/JSON.md, rows[]."""

    label: str
    m: int
    n: int
    k: int
    backend: str
    state: str = "ok"            # "ok", "unsupported", "FAILED"
    variant: str = ""
    reason: str = ""
    verified: int = 0            # 1 matched the reference, 0 failed or not checked
    verify_note: str = ""
    err_max: float = math.nan
    err_norm: float = math.nan
    l2: str = "cold"             # "cold", "warm", "hot", "n/a"
    timing: str = "graph"        # "graph", "graph-nogate", "launch", "host"
    copies: int = 0
    batch: int = 0
    rotation_bytes: float = 0.0
    verified_copies: int = 0     # copies verified after timing
    gpu: int = 0                 # the CUDA device the row ran on (fp4bench run --gpus)
    own_err: float = math.nan    # lossy backends only; NaN: not applicable
    interrupted: bool = False    # timing cut short by Ctrl-C
    time_us: Stats = field(default_factory=Stats)
    launch_us: Optional[Stats] = None
    timed_out: bool = False
    prepare_ms: float = 0.0
    flops: float = 0.0
    bytes: float = 0.0
    tflops: float = 0.0
    gbps: float = 0.0
    floor_us: float = 0.0
    pct_roofline: float = -1.0
    pct_peak: float = -1.0
    ratio: Optional[tuple[float, float, float]] = None  # value, lo, hi
    telemetry: Optional[dict[str, Any]] = None
    samples_us: Optional[list[float]] = None
    # what `fp4bench moe` and `run --gpus` add (docs/JSON.md), kept as read so a file
    # read and written again keeps them: an MoE row's workload and its steps
    moe: Optional[dict[str, Any]] = None
    steps: Optional[list[dict[str, Any]]] = None

    @property
    def median_us(self) -> float:
        """The median time per call; NaN for a row that was not timed."""
        return self.time_us.median if self.time_us.count > 0 else math.nan

    def to_json(self, keep_samples: bool) -> dict[str, Any]:
        o: dict[str, Any] = {
            "label": _cut(self.label, "label"),
            "m": int(self.m), "n": int(self.n), "k": int(self.k),
            "backend": _cut(self.backend, "backend"),
            "variant": _cut(self.variant, "variant"),
            "state": self.state,
            "reason": _cut(self.reason, "reason"),
            "verified": int(self.verified),
            "verify_note": _cut(self.verify_note, "verify_note"),
            "err_max": _num(self.err_max), "err_norm": _num(self.err_norm),
            "l2": _cut(self.l2, "l2"), "timing": _cut(self.timing, "timing"),
            "copies": int(self.copies), "batch": int(self.batch),
            "rotation_bytes": _num(self.rotation_bytes),
            "verified_copies": int(self.verified_copies),
            "gpu": int(self.gpu),
            "own_err": _num(self.own_err),
            "interrupted": bool(self.interrupted),
            "time_us": {k: _num(v) for k, v in self.time_us.to_json().items()},
            "launch_us": None if self.launch_us is None or self.launch_us.count <= 0 else
            {k: _num(v) for k, v in self.launch_us.to_json().items()},
            "timed_out": bool(self.timed_out),
            "prepare_ms": _num(self.prepare_ms),
            "flops": _num(self.flops), "bytes": _num(self.bytes),
            "tflops": _num(self.tflops), "gbps": _num(self.gbps),
            "floor_us": _num(self.floor_us), "pct_roofline": _num(self.pct_roofline),
            "pct_peak": _num(self.pct_peak),
            "ratio": None if self.ratio is None else
            {"value": _num(self.ratio[0]), "lo": _num(self.ratio[1]), "hi": _num(self.ratio[2])},
            "telemetry": None,
        }
        if self.telemetry is not None:
            t = dict(self.telemetry)
            o["telemetry"] = {
                "sm_clock_mhz": _num(t.get("sm_clock_mhz")),
                "sm_clock_min_mhz": _num(t.get("sm_clock_min_mhz")),
                "mem_clock_mhz": _num(t.get("mem_clock_mhz")),
                "power_w": _num(t.get("power_w")),
                "temp_c": _num(t.get("temp_c")),
                "throttle_reasons": _u64(int(t.get("throttle_reasons", 0))),
                "low_clock_samples": int(t.get("low_clock_samples", 0)),
                "samples": int(t.get("samples", 0)),
                "power_cap_samples": int(t.get("power_cap_samples", 0)),
                "thermal_samples": int(t.get("thermal_samples", 0)),
                "hw_slowdown_samples": int(t.get("hw_slowdown_samples", 0)),
            }
        if self.moe is not None:
            o["moe"] = self.moe
        if self.steps is not None:
            o["steps"] = self.steps
        if keep_samples:
            o["samples_us"] = [_num(v) for v in (self.samples_us or [])]
        return o


def default_settings() -> dict[str, Any]:
    """fp4_settings_default, in the JSON's spelling."""
    return {
        "seed": 1, "data": "gaussian", "hot": False, "use_graphs": True,
        "measure_launch": False, "warmup_ms": 200.0, "min_samples": 10,
        "noise_target": 0.005, "min_time_s": 0.0, "max_time_s": 10.0, "baseline": None,
        "keep_samples": False, "measure_ceilings": False, "verify_only": False,
        "time_reference": False, "order_seed": 0, "baseline_tuning": True, "min_batch": 64,
    }


def empty_device() -> dict[str, Any]:
    return {
        "present": False, "why_absent": "", "name": "", "cc_major": 0, "cc_minor": 0,
        "sms": 0, "l2_bytes": 0, "mem_bytes": 0, "driver_version": 0, "runtime_version": 0,
        "sm_clock_max_mhz": 0, "mem_clock_max_mhz": 0, "nvml": False, "driver_string": "",
        "cpu_threads": os.cpu_count() or 1, "peak_bf16_tflops": 0, "peak_fp8_tflops": 0,
        "peak_fp4_tflops": 0, "peak_bw_gbps": 0,
    }


def empty_ceilings() -> dict[str, Any]:
    return {"measured": False, "read_gbps": 0, "bf16_tflops": 0, "fp8_tflops": 0,
            "bf16_sustained_tflops": 0, "fp8_sustained_tflops": 0, "light_ratio": 0,
            "cpu_gflops": 0, "l2_check": None}


@dataclass
class Report:
    """A run: where and how it measured, and its rows (docs/JSON.md)."""

    version: str = ""
    commit: str = "unknown"
    started: str = ""
    host: str = ""
    command: str = ""
    interrupted: bool = False
    device: dict[str, Any] = field(default_factory=empty_device)
    ceilings: dict[str, Any] = field(default_factory=empty_ceilings)
    settings: dict[str, Any] = field(default_factory=default_settings)
    rows: list[Row] = field(default_factory=list)
    gpus: Optional[list[dict[str, Any]]] = None  # `run --gpus`: each GPU, as read

    def to_json(self) -> dict[str, Any]:
        s = dict(self.settings)
        s["seed"] = _u64(s["seed"])
        s["order_seed"] = _u64(s["order_seed"])
        if s.get("baseline"):
            s["baseline"] = _cut(s["baseline"], "baseline")
        for k in ("warmup_ms", "noise_target", "min_time_s", "max_time_s"):
            s[k] = _num(s[k])
        dev = dict(self.device)
        for k in ("name", "why_absent", "driver_string"):
            dev[k] = _cut(str(dev.get(k, "")), k)
        out = {
            "schema": "fp4bench/1",
            "schema_version": SCHEMA_VERSION,
            "fp4bench": {"version": _cut(self.version, "version"),
                         "commit": _cut(self.commit, "commit")},
            "started": _cut(self.started, "started"),
            "host": _cut(self.host, "host"),
            "command": _cut(self.command, "command"),
            "interrupted": bool(self.interrupted),
            "device": {k: (_num(v) if not isinstance(v, str) else v) for k, v in dev.items()},
            "ceilings": {k: (v if isinstance(v, dict) or v is None else _num(v))
                         for k, v in self.ceilings.items()},
            "settings": s,
            "rows": [r.to_json(bool(self.settings.get("keep_samples"))) for r in self.rows],
        }
        if self.gpus is not None:
            out["gpus"] = self.gpus
        return out

    def write_json(self, path: str) -> None:
        """The whole report to path as the CLI writes files (src/io/file.c): a
        symlink is followed and kept; a device or FIFO is written straight
        into (renaming would replace it); a regular or new file is written to
        a fresh temporary beside it, synced and renamed over it, and only
        that temporary is ever removed."""
        text = json.dumps(self.to_json(), indent=1, ensure_ascii=False, allow_nan=False) + "\n"
        target = os.path.realpath(path)
        if os.path.exists(target) and not stat.S_ISREG(os.stat(target).st_mode):
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
            return
        folder, name = os.path.split(target)
        mode = stat.S_IMODE(os.stat(target).st_mode) if os.path.exists(target) else None
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=folder or ".")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            if mode is None:  # what a plain open would give: 0666 less the umask
                mask = os.umask(0o022)
                os.umask(mask)
                mode = 0o666 & ~mask
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise

    def row(self, backend: str, label: Optional[str] = None, m: Optional[int] = None,
            n: Optional[int] = None, k: Optional[int] = None, gpu: Optional[int] = None) -> Row:
        """The first row matching the given fields (KeyError if none); gpu: the
        CUDA device of a `run --gpus` row."""
        for r in self.rows:
            if r.backend == backend and (label is None or r.label == label) and \
                    (m is None or r.m == m) and (n is None or r.n == n) and \
                    (k is None or r.k == k) and (gpu is None or r.gpu == gpu):
                return r
        raise KeyError(f"no row for backend {backend!r} {label or ''} {m}x{n}x{k}"
                       f"{'' if gpu is None else f' on GPU {gpu}'}")

    def table(self) -> str:
        """A plain-text table of the rows (median us with the CLI's flags: T time
        limit, C low clock, P power cap, H thermal or hardware slowdown, W warm
        L2, I interrupted; noise; the ratio with its 95% CI)."""
        head = ["label", "M", "N", "K", "backend", "median us", "noise", "ratio [95% CI]",
                "TFLOP/s", "verified"]
        # rows of several GPUs (`run --gpus`) would read as duplicates without their GPU
        by_gpu = self.gpus is not None or any(r.gpu != 0 for r in self.rows)
        lines = [head + (["GPU"] if by_gpu else [])]
        for r in self.rows:
            gpu = [str(r.gpu)] if by_gpu else []
            if r.state != "ok":
                lines.append([r.label, str(r.m), str(r.n), str(r.k), r.backend, "-", "-", "-",
                              "-", f"{r.state} ({r.reason})"] + gpu)
                continue
            # an untimed row (--verify-only, count 0) has no time: "-", as the CLI's table
            med = r.time_us.median if r.time_us.count > 0 else math.nan
            noise = r.time_us.noise if r.time_us.count > 0 else math.nan
            ratio = "-" if r.ratio is None else \
                f"{r.ratio[0]:.2f}x [{r.ratio[1]:.2f}, {r.ratio[2]:.2f}]"
            tel = r.telemetry or {}
            flags = ("T" if r.timed_out else "") + ("C" if tel.get("low_clock_samples") else "") + \
                ("P" if tel.get("power_cap_samples") else "") + \
                ("H" if tel.get("thermal_samples") or tel.get("hw_slowdown_samples") else "") + \
                ("W" if r.l2 == "warm" else "") + ("I" if r.interrupted else "")
            lines.append([r.label, str(r.m), str(r.n), str(r.k), r.backend,
                          f"{med:.3f}{(' ' + flags) if flags else ''}" if math.isfinite(med)
                          else "-",
                          f"{100 * noise:.2f}%" if math.isfinite(noise) else "-",
                          ratio, f"{r.tflops:.3g}" if r.tflops else "-",
                          f"ok {r.err_max:.2g}" if r.verified == 1 else
                          ("reference" if r.verified == -1 else "no")] + gpu)
        width = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
        left = {0, 4, 9}
        out = []
        for line in lines:
            out.append("  ".join(c.ljust(width[i]) if i in left else c.rjust(width[i])
                                 for i, c in enumerate(line)).rstrip())
        return "\n".join(out)


# ---- reading ------------------------------------------------------------------------------


class FormatError(ValueError):
    """A report file that is not schema 1 JSON; the message names the field."""


# The C reader's rules (src/report/json.c), so that a file one reads the other reads
_L2_MODES = ("", "cold", "hot", "warm", "n/a")
_TIMING_MODES = ("", "graph", "graph-nogate", "launch", "host")
_STATES = ("ok", "unsupported", "FAILED")
_MAX_EXACT_INT = (1 << 53) - 1


def _f(o: dict, key: str, where: str) -> float:
    v = o.get(key)
    if v is None:
        return math.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise FormatError(f"{where}.{key}: expected a number or null")
    if not math.isfinite(v):
        raise FormatError(f"{where}.{key}: number out of range (not finite)")
    return float(v)


def _i(o: dict, key: str, where: str, default: Optional[int] = None, lo: int = -_MAX_EXACT_INT,
       hi: int = _MAX_EXACT_INT) -> int:
    """An integral number in [lo, hi]; absent: default (None: required)."""
    if key not in o:
        if default is None:
            raise FormatError(f"{where}.{key}: missing")
        return default
    v = o[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or \
            (isinstance(v, float) and not v.is_integer()):
        raise FormatError(f"{where}.{key}: expected an integer")
    if not lo <= v <= hi:
        raise FormatError(f"{where}.{key}: integer out of range [{lo}, {hi}]")
    return int(v)


def _read_u64(o: dict, key: str, where: str) -> Any:
    """A 64-bit unsigned value: an integer or its decimal string (absent: left out)."""
    v = o.get(key)
    if isinstance(v, str):
        if not v.isdigit() or int(v) >= 1 << 64:
            raise FormatError(f"{where}.{key}: expected an unsigned 64-bit decimal string")
        return int(v)
    if v is not None:
        return _i(o, key, where, lo=0)
    return v


def _s(o: dict, key: str, where: str, default: Optional[str] = None,
       allowed: Optional[tuple[str, ...]] = None) -> str:
    if key not in o:
        if default is None:
            raise FormatError(f"{where}.{key}: missing")
        return default
    v = o[key]
    if not isinstance(v, str):
        raise FormatError(f"{where}.{key}: expected a string")
    if "\0" in v:
        raise FormatError(f"{where}.{key}: holds \\u0000 (a NUL character)")
    if allowed is not None and v not in allowed:
        raise FormatError(f"{where}.{key}: expected one of {', '.join(repr(a) for a in allowed)}")
    return v


def _obj(o: dict, key: str, where: str) -> Optional[dict]:
    v = o.get(key)
    if v is not None and not isinstance(v, dict):
        raise FormatError(f"{where}.{key}: expected an object or null")
    return v


def _stats(o: Any, where: str) -> Stats:
    if not isinstance(o, dict) or "count" not in o:
        raise FormatError(f"{where}: expected an object with count")
    s = Stats(_i(o, "count", where, lo=0), *(_f(o, k, where) for k in
                                                ("median", "p10", "p90", "min", "max", "mean",
                                                 "stdev", "noise")))
    if s.noise < 0:
        raise FormatError(f"{where}.noise: negative (a relative width is >= 0)")
    if s.count > 0:  # order statistics of times, among those given (null, or 0: not filled)
        prev, prev_name = 0.0, ""
        for name in ("min", "p10", "median", "p90", "max"):
            v = getattr(s, name)
            if name == "median" and v <= 0:
                raise FormatError(f"{where}.median: expected a positive time (the row has "
                                  "samples) or null")
            if v < 0:
                raise FormatError(f"{where}.{name}: negative (a time is >= 0)")
            if math.isnan(v) or v == 0:
                continue
            if prev_name and v < prev * (1 - 1e-12):
                raise FormatError(f"{where}.{name}: below {prev_name}: not statistics of one "
                                  "sample set")
            prev, prev_name = v, name
    return s


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    d: dict = {}
    for k, v in pairs:
        if k in d:  # json.loads would keep the last silently; the C reader refuses it
            raise FormatError(f"{k}: given twice")
        d[k] = v
    return d


def _no_constant(name: str) -> Any:
    raise FormatError(f"{name} is not JSON (a non-finite number is written as null)")


def parse_json(text: str, name: str = "(memory)") -> Report:
    """A report from its JSON text (see read_json)."""
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise FormatError(f"{name}: not valid JSON ({e})") from None
    except FormatError as e:
        raise FormatError(f"{name}: {e}") from None
    if not isinstance(doc, dict):
        raise FormatError(f"{name}: (top level): expected an object")
    if doc.get("schema") != "fp4bench/1":  # the C reader's rule: other JSON is no report
        raise FormatError(f"{name}: schema: expected 'fp4bench/1', got {doc.get('schema')!r}: "
                          "not an fp4bench report")
    for key in ("device", "settings"):  # every writer puts them; defaults would pass for facts
        if not isinstance(doc.get(key), dict):
            raise FormatError(f"{name}: {key}: missing: not an fp4bench report")
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise FormatError(f"{name}: schema_version: expected {SCHEMA_VERSION}, "
                          f"got {doc.get('schema_version')!r}")
    if not isinstance(doc.get("rows"), list):
        raise FormatError(f"{name}: rows: missing or not an array")
    rep = Report()
    fb = _obj(doc, "fp4bench", name) or {}
    rep.version = _s(fb, "version", f"{name}: fp4bench", "")
    rep.commit = _s(fb, "commit", f"{name}: fp4bench", "")
    rep.started = _s(doc, "started", name, "")
    rep.host = _s(doc, "host", name, "")
    rep.command = _s(doc, "command", name, "")
    rep.interrupted = bool(doc.get("interrupted", False))
    rep.device.update(doc.get("device") or {})
    rep.ceilings.update(_obj(doc, "ceilings", name) or {})
    rep.settings.update(doc.get("settings") or {})
    gpus = doc.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, dict) for g in gpus)):
        raise FormatError(f"{name}: gpus: expected an array of objects or null")
    rep.gpus = gpus
    for key in ("seed", "order_seed"):
        if key in rep.settings:
            rep.settings[key] = _read_u64(rep.settings, key, f"{name}: settings")
    for i, o in enumerate(doc["rows"]):
        w = f"{name}: rows[{i}]"
        if not isinstance(o, dict):
            raise FormatError(f"{w}: expected an object")
        m, n, k = (_i(o, key, w, lo=1) for key in ("m", "n", "k"))
        if k % 16:
            raise FormatError(f"{w}.k: not a multiple of 16 (the NVFP4 block)")
        if k > 1 << 20:
            raise FormatError(f"{w}.k: above 2^20 (no run measures such a K)")
        if m * n > 1 << 61:
            raise FormatError(f"{w}: shape {m}x{n}x{k}: output size overflows")
        ratio = _obj(o, "ratio", w)
        if ratio is not None:
            rv = (_f(ratio, "value", f"{w}.ratio"), _f(ratio, "lo", f"{w}.ratio"),
                  _f(ratio, "hi", f"{w}.ratio"))
            if rv[0] <= 0 or rv[1] <= 0:
                raise FormatError(f"{w}.ratio: expected a positive ratio or null")
            if rv[1] > rv[2]:
                raise FormatError(f"{w}.ratio.hi: below lo")
        tel = _obj(o, "telemetry", w)
        if tel is not None and "throttle_reasons" in tel:
            tel = dict(tel, throttle_reasons=_read_u64(tel, "throttle_reasons", f"{w}.telemetry"))
        samples = o.get("samples_us")
        if samples is not None:
            if not isinstance(samples, list):
                raise FormatError(f"{w}.samples_us: expected an array")
            for j, v in enumerate(samples):
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or
                                      not math.isfinite(v) or v <= 0):
                    raise FormatError(f"{w}.samples_us[{j}]: expected a positive time or null")
        steps = o.get("steps")
        if steps is not None and not (isinstance(steps, list) and
                                      all(isinstance(x, dict) for x in steps)):
            raise FormatError(f"{w}.steps: expected an array of objects or null")
        time_us = _stats(o.get("time_us"), f"{w}.time_us")
        rep.rows.append(Row(
            label=_s(o, "label", w), m=m, n=n, k=k,
            backend=_s(o, "backend", w), state=_s(o, "state", w, allowed=_STATES),
            variant=_s(o, "variant", w, ""),
            reason=_s(o, "reason", w, ""), verified=_i(o, "verified", w, 0, -1, 1),
            verify_note=_s(o, "verify_note", w, ""), err_max=_f(o, "err_max", w),
            err_norm=_f(o, "err_norm", w), l2=_s(o, "l2", w, allowed=_L2_MODES),
            timing=_s(o, "timing", w, "", allowed=_TIMING_MODES),
            copies=_i(o, "copies", w, 0, 0), batch=_i(o, "batch", w, 0, 0),
            rotation_bytes=_f(o, "rotation_bytes", w),
            verified_copies=_i(o, "verified_copies", w, 0, 0), gpu=_i(o, "gpu", w, 0, 0),
            own_err=_f(o, "own_err", w),
            interrupted=bool(o.get("interrupted", False)),
            time_us=time_us,
            launch_us=None if o.get("launch_us") is None else
            _stats(o["launch_us"], f"{w}.launch_us"),
            timed_out=bool(o.get("timed_out", False)), prepare_ms=_f(o, "prepare_ms", w),
            flops=_f(o, "flops", w), bytes=_f(o, "bytes", w), tflops=_f(o, "tflops", w),
            gbps=_f(o, "gbps", w), floor_us=_f(o, "floor_us", w),
            pct_roofline=_f(o, "pct_roofline", w), pct_peak=_f(o, "pct_peak", w),
            ratio=None if ratio is None else rv,
            telemetry=tel,
            samples_us=None if samples is None else
            [math.nan if v is None else float(v) for v in samples],
            moe=_obj(o, "moe", w), steps=steps,
        ))
    return rep


def read_json(path: str) -> Report:
    """A report written by bench() or `fp4bench run --json` (schema_version 1)."""
    with open(path, encoding="utf-8") as f:
        try:
            text = f.read()
        except UnicodeDecodeError as e:
            raise FormatError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse_json(text, str(path))


__all__ = ["Row", "Report", "read_json", "parse_json", "FormatError", "SCHEMA_VERSION"]
