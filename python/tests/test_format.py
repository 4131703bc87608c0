"""quantize / dequantize / reference_gemm / check against the CLI, bit for bit:
`fp4bench quantize` on a .npy gives the package's codes, scales and global
scale; `fp4bench gemm` the package's reference; `fp4bench check` its verdict."""

from __future__ import annotations

import re
import struct
import unittest

import numpy as np

from _util import TmpDir, gaussian, read_safetensors, run, save_bf16_npy

import fp4bench
from fp4bench import format as fmt


def cli_quantize(tmp: TmpDir, npy: str, *extra: str) -> tuple[np.ndarray, np.ndarray, float]:
    out = tmp / "q.safetensors"
    run("quantize", "--in", npy, "--out", out, *extra)
    t = read_safetensors(out)
    dt, shape, raw = t["weight"]
    assert dt == "U8"
    codes = np.frombuffer(raw, dtype=np.uint8).reshape(shape)
    dt, shape, raw = t["weight_scale"]
    assert dt == "F8_E4M3"
    scales = np.frombuffer(raw, dtype=np.uint8).reshape(shape)
    dt, shape, raw = t["weight_scale_2"]
    assert dt == "F32" and len(raw) == 4
    return codes, scales, struct.unpack("<f", raw)[0]


class QuantizeMatchesCli(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TmpDir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def same(self, q: fp4bench.NVFP4, cli: tuple[np.ndarray, np.ndarray, float]) -> None:
        codes, scales, gs = cli
        np.testing.assert_array_equal(q.codes, codes)
        np.testing.assert_array_equal(q.scales, scales)
        self.assertEqual(np.float32(q.global_scale).tobytes(), np.float32(gs).tobytes())

    def test_float32(self) -> None:
        for rows, cols, scale in [(7, 64, 1.0), (130, 2880, 3e-3), (1, 16, 1e4)]:
            x = gaussian(rows, cols, rows, scale)
            x[0, 3] = 0.0
            np.save(self.tmp / "x.npy", x)
            self.same(fp4bench.quantize(x), cli_quantize(self.tmp, self.tmp / "x.npy"))

    def test_outliers_and_ties(self) -> None:
        x = gaussian(33, 96, 5)
        x[:, 7::32] *= 30.0
        x[3, :16] = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -0.75, 6.0, -6.0, 0.0,
                     -0.0, 1e-30, 448.0 * 6, 1.0]
        np.save(self.tmp / "x.npy", x)
        self.same(fp4bench.quantize(x), cli_quantize(self.tmp, self.tmp / "x.npy"))

    def test_encode_scale(self) -> None:
        x = gaussian(20, 128, 2)
        np.save(self.tmp / "x.npy", x)
        cli = cli_quantize(self.tmp, self.tmp / "x.npy", "--encode-scale", "1234.5")
        self.same(fp4bench.quantize(x, encode_scale=1234.5), cli)
        q = fp4bench.quantize(x, global_scale=1.0 / 1234.5)
        self.assertEqual(np.float32(q.global_scale), np.float32(1) / np.float32(1234.5))
        # a scale that loses the tensor is refused, one that clips some blocks warns (the CLI's rules)
        for scale in (1e-30, 1e30):
            with self.assertRaises(ValueError):
                fp4bench.quantize(x, encode_scale=scale)
            p = run("quantize", "--in", self.tmp / "x.npy", "--out", self.tmp / "s.safetensors",
                    "--encode-scale", str(scale), check_rc=None)
            self.assertEqual(p.returncode, 2, p.stderr)
        x[0, :16] *= 1e4  # one block far above the rest: clipped at a scale that fits the others
        with self.assertWarns(UserWarning):
            fp4bench.quantize(x, encode_scale=1234.5)

    def test_bf16_and_fp16(self) -> None:
        x = gaussian(24, 64, 3)
        bits = fmt.f32_to_bf16(x)
        save_bf16_npy(self.tmp / "x.npy", bits)
        cli = cli_quantize(self.tmp, self.tmp / "x.npy")
        self.same(fp4bench.quantize(bits), cli)                    # fp4_quantize_bf16
        self.same(fp4bench.quantize(fmt.bf16_to_f32(bits)), cli)   # the same values
        h = x.astype(np.float16)
        np.save(self.tmp / "h.npy", h)
        self.same(fp4bench.quantize(h), cli_quantize(self.tmp, self.tmp / "h.npy"))

    def test_load_and_save(self) -> None:
        x = gaussian(40, 48, 4)
        np.save(self.tmp / "x.npy", x)
        run("quantize", "--in", self.tmp / "x.npy", "--out", self.tmp / "c.safetensors")
        loaded = fp4bench.NVFP4.load(self.tmp / "c.safetensors")
        q = fp4bench.quantize(x)
        self.same(loaded, (q.codes, q.scales, q.global_scale))
        q.save(self.tmp / "p.safetensors")
        t = read_safetensors(self.tmp / "p.safetensors")
        np.testing.assert_array_equal(np.frombuffer(t["weight"][2], np.uint8).reshape(40, 24),
                                      q.codes)

    def test_rejects(self) -> None:
        with self.assertRaises(fp4bench.Fp4Error):
            fp4bench.quantize(np.full((2, 16), np.nan, np.float32))
        with self.assertRaises(fp4bench.Fp4Error):
            fp4bench.quantize(np.ones((2, 24), np.float32))
        with self.assertRaises(ValueError):
            fp4bench.quantize(np.ones(32, np.float32))
        with self.assertRaises(TypeError):
            fp4bench.quantize(np.ones((2, 32), np.int32))


class Dequantize(unittest.TestCase):
    def test_values(self) -> None:
        x = gaussian(9, 80, 6)
        q = fp4bench.quantize(x)
        e2m1, e4m3 = fmt.e2m1_table(), fmt.e4m3_table()
        lo, hi = q.codes & 15, q.codes >> 4
        codes = np.stack([lo, hi], axis=-1).reshape(9, 80)
        want = e2m1[codes] * np.repeat(e4m3[q.scales], 16, axis=1)
        np.testing.assert_array_equal(fp4bench.dequantize(q, with_global_scale=False), want)
        np.testing.assert_array_equal(fp4bench.dequantize(q),
                                      want * np.float32(q.global_scale))
        # e2m1 * e4m3 is exact in bf16
        np.testing.assert_array_equal(fmt.bf16_to_f32(fmt.f32_to_bf16(want)), want)

    def test_swizzle(self) -> None:
        for rows, cols in [(1, 16), (130, 96), (300, 2880)]:
            q = fp4bench.quantize(gaussian(rows, cols, rows))
            self.assertEqual(q.scales_swizzled.shape,
                             (-(-rows // 128) * 128, -(-(cols // 16) // 4) * 4))
            idx = fmt.swizzle_index(rows, cols)
            np.testing.assert_array_equal(q.scales_swizzled.reshape(-1)[idx], q.scales)
            np.testing.assert_array_equal(
                fp4bench.unswizzle_scales(q.scales_swizzled, rows, cols), q.scales)
            flat = q.scales_swizzled.reshape(-1).copy()
            flat[idx.reshape(-1)] = 0
            self.assertFalse(flat.any(), "padding bytes must be zero")
        # scales that do not match cols are refused, never read past their end
        for shape, cols in [((4, 1), 64), ((128, 1), 1600000), ((4, 4), 60), ((64,), 16)]:
            with self.assertRaises(ValueError):
                fp4bench.swizzle_scales(np.zeros(shape, np.uint8), cols)

    def test_bf16_rounding(self) -> None:
        x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, -np.inf, 3.4e38, 1e-40],
                     np.float32)
        bits = fmt.f32_to_bf16(x)
        self.assertEqual(list(bits[:4]), [0x3F80, 0x3F80, 0x3F82, 0xC020])
        self.assertEqual(bits[4], 0x7F80)
        self.assertTrue(np.isnan(fmt.bf16_to_f32(fmt.f32_to_bf16(np.array([np.nan],
                                                                          np.float32))))[0])


class ReferenceAndCheck(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TmpDir()
        self.a = fp4bench.quantize(gaussian(12, 96, 10))
        self.b = fp4bench.quantize(gaussian(20, 96, 11, 0.01))
        self.a.save(self.tmp / "a.safetensors")
        self.b.save(self.tmp / "b.safetensors")

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_gemm_matches_cli(self) -> None:
        run("gemm", "--a", self.tmp / "a.safetensors", "--b", self.tmp / "b.safetensors",
            "--out", self.tmp / "d.npy")
        d = np.load(self.tmp / "d.npy")
        r = fp4bench.reference_gemm(self.a, self.b)
        self.assertEqual(d.dtype, np.float32)
        np.testing.assert_array_equal(d, r)
        self.assertEqual(r.shape, (12, 20))
        np.testing.assert_array_equal(fp4bench.reference_gemm(self.a.negated(), self.b), -r)
        self.assertAlmostEqual(float(r[3, 7]), fmt.naive_element(self.a, self.b, 3, 7),
                               delta=1e-6 * abs(float(r[3, 7])))

    def check_both(self, d: np.ndarray, *tol: str) -> fp4bench.Verdict:
        np.save(self.tmp / "d.npy", d)
        p = run("check", "--a", self.tmp / "a.safetensors", "--b", self.tmp / "b.safetensors",
                "--d", self.tmp / "d.npy", *tol, check_rc=None)
        kw = {}
        if tol:
            kw = {"tol_max": float(tol[1]), "tol_norm": float(tol[3])}
        v = fp4bench.check(d, self.a, self.b, **kw)
        self.assertEqual(p.returncode, 0 if v.passed else 1, p.stdout)
        m = re.search(r"max\|D-R\|/max\|R\| = (\S+) \(tol (\S+)\), \|\|D-R\|\|/\|\|R\|\| = "
                      r"(\S+) \(tol (\S+)\), NaN/Inf (\d+), zeros (\d+)", p.stdout)
        self.assertIsNotNone(m, p.stdout)
        self.assertEqual(m.group(1), f"{v.err_max:.3g}")
        self.assertEqual(m.group(2), f"{v.tol_max:.3g}")
        self.assertEqual(m.group(3), f"{v.err_norm:.3g}")
        self.assertEqual(m.group(4), f"{v.tol_norm:.3g}")
        self.assertEqual(int(m.group(5)), v.nonfinite)
        self.assertEqual(int(m.group(6)), v.zeros_d)
        if not v.passed:
            self.assertIn(v.why, p.stdout)
        return v

    def test_check_matches_cli(self) -> None:
        r = fp4bench.reference_gemm(self.a, self.b)
        self.assertTrue(self.check_both(r).passed)
        bf = fmt.bf16_to_f32(fmt.f32_to_bf16(r))
        v = self.check_both(bf)
        self.assertTrue(v.passed and v.err_max > 0)
        self.assertTrue(self.check_both(fmt.f32_to_bf16(r).view("V2")).passed)  # bf16 .npy
        off = r.copy()
        off[2, 3] += 0.05 * np.abs(r).max()
        self.assertFalse(self.check_both(off).passed)
        self.assertTrue(self.check_both(off, "--tol-max", "0.1", "--tol-norm", "0.1").passed)
        nan = r.copy()
        nan[0, 0] = np.nan
        v = self.check_both(nan)
        self.assertFalse(v.passed)
        self.assertEqual(v.nonfinite, 1)
        self.assertFalse(self.check_both(np.zeros_like(r)).passed)
        self.assertFalse(self.check_both(-r).passed)

    def test_tolerances(self) -> None:
        self.assertEqual(fmt.tolerances(), (1e-2, 5e-3))
        self.assertEqual(fmt.tolerances("cpu-ref"), (0.0, 0.0))
        with self.assertRaises(KeyError):
            fmt.tolerances("no-such-backend")
        r = fp4bench.reference_gemm(self.a, self.b)
        bf = fmt.bf16_to_f32(fmt.f32_to_bf16(r))
        self.assertFalse(fp4bench.check(bf, self.a, self.b, backend="cpu-ref").passed)
        self.assertTrue(fp4bench.check(bf, self.a, self.b).passed)
        with self.assertRaises(ValueError):
            fp4bench.check(r[:, :5], self.a, self.b)


if __name__ == "__main__":
    unittest.main()
