"""The GPU path of bench() (device="cuda") on a stand-in torch (tests/fake_torch)
where neither torch nor a GPU is here: operand bundles on the "device", bf16
dequantized operands, float8 scales, verification with odd copies, capture
and rounds. The real thing runs on the GPU machine (docs/PYTHON.md)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import unittest
from pathlib import Path
from typing import Any

import numpy as np

import _util  # noqa: F401

import fp4bench
from fp4bench import format as fmt

FAKE = str(Path(__file__).resolve().parent / "fake_torch")
REAL_TORCH = importlib.util.find_spec("torch") is not None


@unittest.skipIf(REAL_TORCH, "torch is installed: the GPU path is tested on the GPU machine")
class FakeGpuPath(unittest.TestCase):
    torch: Any = None

    @classmethod
    def setUpClass(cls) -> None:  # the stand-in, for this class only
        sys.path.insert(0, FAKE)
        cls.torch = importlib.import_module("torch")

    @classmethod
    def tearDownClass(cls) -> None:
        sys.path.remove(FAKE)
        sys.modules.pop("torch", None)

    def test_bundles_verification_and_rounds(self) -> None:
        torch = self.torch
        seen = {}

        def dq_mm(ops):
            assert ops.a_dq.dtype is torch.bfloat16 and ops.b_dq.dtype is torch.bfloat16
            assert ops.a_scale.dtype is torch.float8_e4m3fn
            assert ops.a.dtype is torch.uint8 and ops.alpha.a.shape == (1,)
            seen.setdefault("copies", set()).add(ops.copy)
            d = np.float32(ops.alpha_f) * (ops.a_dq.a @ ops.b_dq.a.T)
            ops.out.a[:] = d  # the output buffer (bf16 values)
            return None

        index = {}

        def from_codes(ops):  # a dequantizer that reads the codes and swizzled scales
            m, n, k = ops.m, ops.n, ops.k

            def dq(codes, sw, rows):
                c = codes.a
                nib = np.stack([c & 15, c >> 4], -1).reshape(rows, k)
                if (rows, k) not in index:
                    index[rows, k] = fmt.swizzle_index(rows, k)
                sf = fmt.e4m3_table()[sw.a.reshape(-1)[index[rows, k]]]
                return fmt.e2m1_table()[nib] * np.repeat(sf, 16, axis=1)

            return torch.Tensor(np.float32(ops.alpha_f) * (dq(ops.a, ops.a_scale, m) @
                                                           dq(ops.b, ops.b_scale, n).T),
                                torch.float32)

        def ignores_sign(ops):
            return torch.Tensor(np.float32(ops.alpha_f) * (np.abs(ops.a_dq.a) @ ops.b_dq.a.T),
                                torch.float32)

        cap = torch.captured
        rep = fp4bench.bench({"dq-mm": cap(dq_mm),
                              "codes": fp4bench.Backend(cap(from_codes), needs_dequantized=False),
                              "abs": cap(ignores_sign)},
                             [(16, 256, 512, "moe-up"), (1, 16, 16)], warmup_ms=1,
                             max_time=0.2, progress=False)
        by = {(r.backend, r.m): r for r in rep.rows}
        r = by[("dq-mm", 16)]
        self.assertEqual((r.state, r.verified, r.timing), ("ok", 1, "graph"), r.reason)
        self.assertEqual(r.l2, "cold")
        self.assertEqual(r.copies, fp4bench.harness.copies_for(1 << 20, 150e9, r.bytes, False,
                                                               True))
        self.assertEqual(r.batch % r.copies, 0)
        self.assertEqual(r.batch, fp4bench.harness.batch_for(r.copies, 1.0) if r.batch >= 64
                         else r.copies)  # one pass when 64 slow fake calls pass 20 ms
        self.assertEqual(by[("codes", 16)].state, "ok", by[("codes", 16)].reason)
        self.assertEqual(by[("codes", 16)].err_max, 0.0)  # float32 out, exact
        self.assertEqual(r.verified_copies, r.copies)
        self.assertGreaterEqual(r.rotation_bytes, 3 * (1 << 20))
        self.assertEqual(by[("abs", 16)].state, "FAILED")
        self.assertIn("copy", by[("abs", 16)].reason)
        self.assertEqual(by[("dq-mm", 1)].l2, "warm")  # too small for 3x L2 in 1024 copies
        self.assertEqual(rep.device["name"], "NVIDIA H200")
        self.assertEqual(rep.device["runtime_version"], 12080)
        self.assertEqual(rep.device["peak_bw_gbps"], 4800)  # the library's datasheet table
        self.assertGreater(len(seen["copies"]), 2)
        self.assertIsNotNone(by[("codes", 16)].ratio)


if __name__ == "__main__":
    unittest.main()
