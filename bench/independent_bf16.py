#!/usr/bin/env python3
"""Independent check of fp4bench's cublas-bf16 numbers (issue 3): time
torch.matmul (cuBLAS) bf16 on random data the way fp4bench does it, but with
none of its code: CUDA graph of a batch of calls rotating through enough
operand copies to exceed 3x L2, CUDA events, median of >= 30 samples.

usage: python3 bench/independent_bf16.py [M N K ...]   (default 4096 2048 6144)
Prints one line per shape: median us and TFLOP/s."""
import sys

import torch


def measure(m, n, k):
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    per_call = 2 * (m * k + n * k + m * n)
    copies = max(1, -(-3 * l2 // per_call))
    a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    b = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    d = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
    reps = max(1, int(200e-6 / 1e-5 / copies))  # rough: ~200 us per sample
    batch = copies * reps
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(copies):  # warm cuBLAS (workspace, heuristics) before capture
            torch.matmul(a[i], b[i].t(), out=d[i])
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(batch):
            torch.matmul(a[i % copies], b[i % copies].t(), out=d[i % copies])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    import time
    t0 = time.time()
    while time.time() - t0 < 0.3:  # warm-up so clocks settle
        g.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(50):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / batch)
    samples.sort()
    med = samples[len(samples) // 2]
    return med, 2.0 * m * n * k / (med * 1e-6) / 1e12, copies, batch


def main():
    args = [int(x) for x in sys.argv[1:]] or [4096, 2048, 6144]
    if len(args) % 3:
        sys.exit("usage: independent_bf16.py [M N K ...]")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for i in range(0, len(args), 3):
        m, n, k = args[i:i + 3]
        med, tflops, copies, batch = measure(m, n, k)
        print(f"independent torch bf16 {m}x{n}x{k}: median {med:.2f} us, {tflops:.1f} TFLOP/s "
              f"(cold: {copies} copies, batch {batch}, CUDA graph)")


if __name__ == "__main__":
    main()
