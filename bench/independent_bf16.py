#!/usr/bin/env python3
"""Independent check of fp4bench's cublas-bf16 numbers (issue 3): time
torch.matmul (cuBLAS) bf16 on random data the way fp4bench does it, but with
none of its code: CUDA graph of a batch of calls rotating through enough
operand copies to exceed 3x L2, CUDA events, median of >= 30 samples.

usage: python3 bench/independent_bf16.py [M N K ...]   (default 4096 2048 6144)
Prints two lines per shape (NVFP4-valued and randn operands): median us, TFLOP/s."""
import sys

import torch


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def make(rows, cols, dev, nvfp4_values):
    """bf16 operand: plain randn, or randn rounded to NVFP4 values (e2m1 times an
    e4m3 scale per 16), which is what fp4bench's cublas-bf16 multiplies. The
    tensor cores' power (so the clock) depends on the operand bits, so the two
    kinds of data run at different rates."""
    x = torch.randn(rows, cols, device=dev, dtype=torch.float32)
    if not nvfp4_values:
        return x.to(torch.bfloat16)
    blk = x.view(rows, cols // 16, 16)
    sf = (blk.abs().amax(-1, keepdim=True) / 6).to(torch.float8_e4m3fn).to(torch.float32)
    q = blk / torch.where(sf > 0, sf, torch.ones_like(sf))
    grid = torch.tensor(E2M1, device=dev)
    idx = (q.abs().unsqueeze(-1) - grid).abs().argmin(-1)
    q = grid[idx] * torch.sign(q)
    return (q * sf).view(rows, cols).to(torch.bfloat16)


def measure(m, n, k, nvfp4_values):
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(dev).L2_cache_size
    per_call = 2 * (m * k + n * k + m * n)
    copies = max(1, -(-3 * l2 // per_call))
    a = [make(m, k, dev, nvfp4_values) for _ in range(copies)]
    b = [make(n, k, dev, nvfp4_values) for _ in range(copies)]
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
        for nvfp4_values in (True, False):
            med, tflops, copies, batch = measure(m, n, k, nvfp4_values)
            data = "NVFP4-valued" if nvfp4_values else "randn"
            print(f"independent torch bf16 {m}x{n}x{k} {data}: median {med:.2f} us, "
                  f"{tflops:.1f} TFLOP/s (cold: {copies} copies, batch {batch}, CUDA graph)")


if __name__ == "__main__":
    main()
