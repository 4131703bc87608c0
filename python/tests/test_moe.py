"""moe_reference and moe_layer_reference: the exact routed-MoE references from
Python. W4A4 gate_up is bit for bit the library's reference GEMM of each
(token, slot) pair against its expert; W4A16 and down agree with a float64
computation written here from the definitions (docs/MOE.md); the layer is its
steps composed, with the activations written here; bad routing and shapes are
refused with a message."""

from __future__ import annotations

import unittest
import warnings

import numpy as np

import _util  # noqa: F401  (the package from this source tree)

import fp4bench
from fp4bench import NVFP4, moe_layer_reference, moe_reference, quantize, reference_gemm
from fp4bench.format import bf16_to_f32, dequantize, f32_to_bf16

E, H, N, T, K = 6, 64, 48, 9, 3


def routing(rng: np.random.Generator, tokens: int = T) -> tuple[np.ndarray, np.ndarray]:
    ids = np.array([rng.choice(E, K, replace=False) for _ in range(tokens)])
    return ids, rng.random((tokens, K)).astype(np.float32)


def pair_products(x_rows: np.ndarray, weights: list[NVFP4], ids: np.ndarray,
                  per_token: bool) -> np.ndarray:
    """Each pair's product in float64: x row (token or pair) times its expert's
    dequantized weight, times the weight's global scale (x's is 1: bf16)."""
    out = []
    for p in range(ids.size):
        w = weights[ids.flat[p]]
        row = x_rows[p // K] if per_token else x_rows[p]
        wd = dequantize(w, with_global_scale=False).astype(np.float64)
        out.append((row @ wd.T) * w.global_scale)
    return np.stack(out)


class MoeReference(unittest.TestCase):
    def setUp(self) -> None:
        self.rng = np.random.default_rng(7)
        self.w = [quantize(self.rng.standard_normal((N, H)).astype(np.float32)) for _ in range(E)]

    def test_w4a4_gate_up_is_the_gemm_reference_per_pair(self) -> None:
        x = quantize(self.rng.standard_normal((T, H)).astype(np.float32))
        ids, _ = routing(self.rng)
        y = moe_reference("gate_up", x, self.w, ids)
        self.assertEqual(y.shape, (T * K, N))
        for t in range(T):
            row = NVFP4(x.codes[t:t + 1], x.scales[t:t + 1], x.global_scale)
            for j in range(K):
                np.testing.assert_array_equal(y[t * K + j], reference_gemm(row, self.w[ids[t, j]])[0],
                                              err_msg=f"pair ({t}, {j})")

    def test_w4a16_gate_up(self) -> None:
        xb = f32_to_bf16(self.rng.standard_normal((T, H)).astype(np.float32))
        ids, _ = routing(self.rng)
        y = moe_reference("gate_up", xb, self.w, ids)
        want = pair_products(bf16_to_f32(xb).astype(np.float64), self.w, ids, per_token=True)
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        # float input: rounded to bf16 first, so the same result
        np.testing.assert_array_equal(moe_reference("gate_up", bf16_to_f32(xb), self.w, ids), y)

    def test_down_combines_the_pairs(self) -> None:
        ids, rw = routing(self.rng)
        h = f32_to_bf16(self.rng.standard_normal((T * K, H)).astype(np.float32))
        out = moe_reference("down", h, self.w, ids, rw)
        self.assertEqual(out.shape, (T, N))
        d = pair_products(bf16_to_f32(h).astype(np.float64), self.w, ids, per_token=False)
        want = np.stack([sum(float(rw[t, j]) * d[t * K + j] for j in range(K)) for t in range(T)])
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        # the weights matter: all-zero routing weights give zeros, not the sum
        self.assertFalse(np.any(moe_reference("down", h, self.w, ids, np.zeros_like(rw))))

    def test_refused(self) -> None:
        x = quantize(self.rng.standard_normal((T, H)).astype(np.float32))
        ids, rw = routing(self.rng)
        bad = [
            (lambda: moe_reference("up", x, self.w, ids), "step 'up'"),
            (lambda: moe_reference("down", x, self.w, ids), "routing_weights"),
            (lambda: moe_reference("gate_up", x, self.w, ids + E), "experts"),
            (lambda: moe_reference("gate_up", x, self.w, np.zeros((T, K), dtype=int)), "twice"),
            (lambda: moe_reference("gate_up", x, self.w[:1] + [quantize(np.ones((N, 32), np.float32))],
                                   np.zeros((T, 1), dtype=int)), "want [48, 64]"),
            (lambda: moe_reference("gate_up", x, self.w, ids[:-1]), "wants"),
            (lambda: moe_reference("down", f32_to_bf16(np.ones((T, H), np.float32)), self.w, ids, rw),
             "wants"),
        ]
        for call, message in bad:
            with self.assertRaises((ValueError, fp4bench.Fp4Error)) as cm:
                call()
            self.assertIn(message, str(cm.exception))


class MoeLayerReference(unittest.TestCase):
    I = 32

    def setUp(self) -> None:
        rng = np.random.default_rng(11)
        self.gu = [quantize(rng.standard_normal((2 * self.I, H)).astype(np.float32)) for _ in range(E)]
        self.dn = [quantize(rng.standard_normal((H, self.I)).astype(np.float32)) for _ in range(E)]
        self.x = f32_to_bf16(rng.standard_normal((T, H)).astype(np.float32))
        self.ids, self.rw = routing(rng)

    def test_w4a16_is_its_steps(self) -> None:
        r = moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw)
        self.assertEqual((r.out.shape, r.y.shape, r.h.shape, r.d.shape),
                         ((T, H), (T * K, 2 * self.I), (T * K, self.I), (T * K, H)))
        self.assertEqual((r.x_encode_scale, r.h_encode_scale), (0.0, 0.0))
        np.testing.assert_array_equal(r.y, moe_reference("gate_up", self.x, self.gu, self.ids))
        g, u = r.y[:, :self.I].astype(np.float64), r.y[:, self.I:].astype(np.float64)
        np.testing.assert_allclose(r.h, g / (1 + np.exp(-g)) * u, rtol=1e-6, atol=1e-30)
        # h rounded to bf16, then down and the combine
        np.testing.assert_array_equal(r.out, moe_reference("down", f32_to_bf16(r.h), self.dn, self.ids,
                                                           self.rw))

    def test_w4a4_static_scales(self) -> None:
        dyn = moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, mode="w4a4")
        self.assertGreater(dyn.x_encode_scale, 0.0)
        self.assertGreater(dyn.h_encode_scale, 0.0)
        xq = quantize(self.x, encode_scale=dyn.x_encode_scale)
        np.testing.assert_array_equal(dyn.y, moe_reference("gate_up", xq, self.gu, self.ids))
        with warnings.catch_warnings():  # the dynamic scale puts h's largest block at E4M3's top
            warnings.simplefilter("ignore")
            hq = quantize(dyn.h, encode_scale=dyn.h_encode_scale)
        np.testing.assert_array_equal(dyn.out, moe_reference("down", hq, self.dn, self.ids, self.rw))
        fixed = moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, mode="w4a4",
                                    x_encode_scale=dyn.x_encode_scale,
                                    h_encode_scale=dyn.h_encode_scale)
        np.testing.assert_array_equal(fixed.out, dyn.out)
        # another static h scale is used as given
        half = moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, mode="w4a4",
                                   x_encode_scale=dyn.x_encode_scale,
                                   h_encode_scale=dyn.h_encode_scale / 2)
        self.assertEqual(half.h_encode_scale, np.float32(dyn.h_encode_scale / 2))

    def test_swiglu_oai(self) -> None:
        r = moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, act="swiglu-oai")
        g = np.minimum(r.y[:, :self.I].astype(np.float64), 7.0)
        u = np.clip(r.y[:, self.I:].astype(np.float64), -7.0, 7.0)
        want = g / (1 + np.exp(-np.float64(np.float32(1.702)) * g)) * (u + 1)
        np.testing.assert_allclose(r.h, want, rtol=1e-6, atol=1e-30)

    def test_refused(self) -> None:
        bad = [
            (lambda: moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, mode="w8a8"), "mode"),
            (lambda: moe_layer_reference(self.x, self.gu, self.dn, self.ids, self.rw, act="relu"), "act"),
            (lambda: moe_layer_reference(self.x, self.gu, self.dn[:-1], self.ids, self.rw), "one of each"),
            (lambda: moe_layer_reference(self.x, self.gu, self.gu, self.ids, self.rw), "down[0]"),
            (lambda: moe_layer_reference(self.x[:-1], self.gu, self.dn, self.ids, self.rw), "want"),
        ]
        for call, message in bad:
            with self.assertRaises((ValueError, fp4bench.Fp4Error)) as cm:
                call()
            self.assertIn(message, str(cm.exception))


if __name__ == "__main__":
    unittest.main()
