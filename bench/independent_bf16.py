#!/usr/bin/env python3
"""Independent check of fp4bench's cublas-bf16 numbers, with none of
its code: torch.mm (cuBLAS) bf16 x bf16 -> bf16 on NVFP4-valued operands, made
the way `fp4bench --data gaussian` makes them (bf16 N(0,1), per-tensor global
scale 448*6/amax, e4m3 block scales of 16, e2m1 codes rounded to nearest even,
then dequantized without the global scale, as cublas-bf16 multiplies them).

Timing follows fp4bench's rules: cold L2 (operand copies rotated over >= 3x
L2), a CUDA graph of `batch` calls (the smallest multiple of the copies >= 64,
fewer when a replay would pass 20 ms), 200 ms of warm-up, CUDA events, median
of the per-call times. Two passes:
  interleaved: an idle gap (host sleep) as long as the sample after each
    sample, like fp4bench's ceilings; the clock recovers between samples;
  back to back: samples one after the other (the GPU may sit at its power cap).

usage: python3 bench/independent_bf16.py [M N K ...]
       (default: 4096 2048 6144 and 8192 8192 8192). One line per shape."""
import statistics
import sys
import time

import torch

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
MIN_BATCH = 64
MAX_SAMPLE_S = 20e-3
MAX_COPIES = 1024
WARMUP_S = 0.2
SAMPLES = 30


def nvfp4_valued(rows, cols, dev, gen):
    """bf16 [rows, cols]: e2m1(code) * e4m3(scale) of gaussian data quantized
    with a global encode scale gs = 2688 / amax, without the global scale."""
    x = torch.randn(rows, cols, device=dev, generator=gen).to(torch.bfloat16).float()
    gs = 2688.0 / x.abs().max()
    blk = x.view(rows, cols // 16, 16)
    bm = blk.abs().amax(-1, keepdim=True)
    sf = (gs * (bm / 6.0)).clamp(max=448.0).to(torch.float8_e4m3fn).float()
    inv = torch.where(sf > 0, 1.0 / (sf / gs), torch.zeros_like(sf))
    a = (blk * inv).abs()
    # round to nearest e2m1 magnitude, ties to the even code (0.25->0, 0.75->1,
    # 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4)
    code = torch.zeros_like(a, dtype=torch.uint8)
    for t, above in ((0.25, True), (0.75, False), (1.25, True), (1.75, False), (2.5, True),
                     (3.5, False), (5.0, True)):
        code += (a > t) if above else (a >= t)
    mag = torch.tensor(E2M1, device=dev)[code.long()]
    v = torch.copysign(mag, blk) * sf  # keeps the sign of zeros, as the codes do
    return v.view(rows, cols).to(torch.bfloat16)


def sample_s(graph, start, end):
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3


def measure(m, n, k, dev, gen):
    props = torch.cuda.get_device_properties(dev)
    per_call = 2 * (m * k + n * k + m * n)  # bf16 A, B and D
    copies = -(-3 * props.L2_cache_size // per_call)
    copies = max(1, min(copies, MAX_COPIES, props.total_memory // 4 // per_call))
    a0, b0 = nvfp4_valued(m, k, dev, gen), nvfp4_valued(n, k, dev, gen)
    a = [a0.clone() for _ in range(copies)]
    b = [b0.clone() for _ in range(copies)]
    d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    del a0, b0

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS picks its kernel and workspace before capture
        for i in range(copies):
            torch.mm(a[i], b[i].t(), out=d[i])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(copies):
        torch.mm(a[i], b[i].t(), out=d[i])
    end.record()
    end.synchronize()
    per_call_s = start.elapsed_time(end) * 1e-3 / copies

    reps = -(-MIN_BATCH // copies)
    while reps > 1 and per_call_s * copies * reps > MAX_SAMPLE_S:
        reps -= 1
    batch = reps * copies
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(batch):
            torch.mm(a[i % copies], b[i % copies].t(), out=d[i % copies])

    medians = []
    for gap in (1.0, 0.0):  # interleaved, then back to back
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < WARMUP_S:  # synchronous: no queue of replays
            s = sample_s(graph, start, end)
            time.sleep(gap * s)
        samples = []
        for _ in range(SAMPLES):
            s = sample_s(graph, start, end)
            samples.append(s / batch)
            time.sleep(gap * s)
        medians.append(statistics.median(samples))
    flops = 2.0 * m * n * k
    return [(med * 1e6, flops / med / 1e12) for med in medians], copies, batch


def main():
    args = [int(x) for x in sys.argv[1:]] or [4096, 2048, 6144, 8192, 8192, 8192]
    if len(args) % 3 or any(x < 1 for x in args) or any(args[i] % 16 for i in range(2, len(args), 3)):
        sys.exit("usage: independent_bf16.py [M N K ...] (sizes >= 1, K a multiple of 16)")
    if not torch.cuda.is_available():
        sys.exit("independent_bf16.py: no CUDA device")
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(dev)}")
    for i in range(0, len(args), 3):
        m, n, k = args[i:i + 3]
        (inter, b2b), copies, batch = measure(m, n, k, dev, gen)
        print(f"independent torch bf16 {m}x{n}x{k}: {inter[1]:.1f} TFLOP/s interleaved "
              f"(median {inter[0]:.2f} us), {b2b[1]:.1f} TFLOP/s back to back "
              f"(median {b2b[0]:.2f} us); NVFP4-valued gaussian, cold L2 {copies} copies, "
              f"graph batch {batch}, {SAMPLES} samples each", flush=True)


if __name__ == "__main__":
    main()
