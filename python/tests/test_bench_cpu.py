"""bench() on the CPU (device="cpu", numpy callables, host timing): the rules
that do not need a GPU. Verification before timing (poison, odd copies from
-A, all-zero and unwritten outputs), unsupported and FAILED rows, the round
order and seeds of the engine, the stopping rule, paired ratios, and a JSON
that `fp4bench compare` reads."""

from __future__ import annotations

import time
import unittest

import numpy as np

from _util import TmpDir, run

import fp4bench
from fp4bench import harness as bm
from fp4bench import report as rp

QUICK = dict(device="cpu", warmup_ms=5, max_time=0.3, progress=False)


def dq_gemm(ops: fp4bench.Operands) -> np.ndarray:
    """alpha * A B^T from the dequantized operands (float32, exact products)."""
    return np.float32(ops.alpha_f) * (ops.a_dq @ ops.b_dq.T)


def into_out(ops: fp4bench.Operands) -> None:
    ops.out[:] = dq_gemm(ops)


class BenchOnCpu(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TmpDir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_verified_timed_and_read_by_compare(self) -> None:
        path = self.tmp / "py.json"
        rep = fp4bench.bench({"np-ret": dq_gemm, "np-out": into_out},
                             [(8, 64, 128), (4, 32, 64, "tiny")], copies=2, json=path,
                             samples=True, **QUICK)
        self.assertEqual(len(rep.rows), 4)
        for r in rep.rows:
            self.assertEqual(r.state, "ok", r.reason)
            self.assertEqual(r.verified, 1)
            self.assertIn("vs cpu-ref", r.verify_note)
            self.assertGreater(r.time_us.count, 0)
            self.assertTrue(r.time_us.count >= 10 or r.timed_out)
            self.assertEqual((r.l2, r.timing, r.copies, r.batch), ("n/a", "host", 2, 1))
            self.assertEqual(len(r.samples_us), r.time_us.count)
            self.assertEqual(r.flops, 2.0 * r.m * r.n * r.k)
        self.assertEqual(rep.rows[0].ratio, (1.0, 1.0, 1.0))  # the baseline: the first
        v, lo, hi = rep.rows[1].ratio
        self.assertTrue(lo <= v <= hi)
        self.assertEqual(rep.settings["baseline"], "np-ret")
        self.assertEqual(rep.settings["order_seed"], bm.derive_order_seed(1))
        back = rp.read_json(path)
        self.assertEqual([x.backend for x in back.rows], ["np-ret", "np-out"] * 2)
        p = run("compare", path, path)
        self.assertIn("4 matched", p.stdout)
        self.assertEqual(p.stderr, "")
        self.assertIn("tiny", rep.table())
        # and `fp4bench report`, where this build has it (not the placeholder)
        p = run("report", path, "--html", self.tmp / "r.html", check_rc=None)
        if "not built yet" not in p.stderr:
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(self.tmp / "r.html", encoding="utf-8") as f:
                self.assertIn("np-out", f.read())

    def test_bad_input_refused_before_running(self) -> None:
        calls = []

        def counted(ops: fp4bench.Operands) -> np.ndarray:
            calls.append(1)
            return dq_gemm(ops)

        for shapes in ([16], [(16, 64)], [(1, 16, 1 << 21)], [(4, 16, 32, "a\0b")],
                       [(4, 16, 32, "\udc80")]):
            with self.subTest(shapes=shapes), self.assertRaises(ValueError):
                fp4bench.bench({"np": counted}, shapes, **QUICK)
        for name in ("a\0b", "x\udc80"):
            with self.subTest(name=name), self.assertRaises(ValueError):
                fp4bench.bench({name: counted}, [(4, 16, 32)], **QUICK)
        with self.assertRaises(OSError) as cm:
            fp4bench.bench({"np": counted}, [(4, 16, 32)], json=self.tmp / "no/x.json", **QUICK)
        self.assertIn("cannot create", str(cm.exception))
        self.assertEqual(calls, [], "a refused bench() ran a backend")
        # one (M, N, K) given bare is one shape
        rep = fp4bench.bench({"np": counted}, (4, 16, 32), **QUICK)
        self.assertEqual([(r.m, r.n, r.k) for r in rep.rows], [(4, 16, 32)])

    def test_ctrl_c(self) -> None:
        """Ctrl-C (KeyboardInterrupt from a call) as the engine: rows with samples are
        kept with their ratio, a row stopped before its first sample is left out."""
        # 1 ms a call: the warm-up (1 s, or 2 ms) and the 50 samples outlast call 30
        for measured, warmup_ms in ((False, 1000.0), (True, 2.0)):
            calls = []

            def stops(ops: fp4bench.Operands) -> np.ndarray:
                calls.append(1)
                time.sleep(0.001)
                if len(calls) == 30:
                    raise KeyboardInterrupt
                return dq_gemm(ops)

            def slow(ops: fp4bench.Operands) -> np.ndarray:
                time.sleep(0.001)
                return dq_gemm(ops)

            path = self.tmp / f"int{int(measured)}.json"
            try:
                fp4bench.bench({"np-ret": slow, "stops": stops}, [(8, 64, 128)], json=path,
                               **dict(QUICK, warmup_ms=warmup_ms, max_time=10, min_samples=50))
                self.fail("no KeyboardInterrupt")
            except KeyboardInterrupt as e:
                rep = e.report  # type: ignore[attr-defined]
            back = rp.read_json(path)
            self.assertTrue(rep.interrupted and back.interrupted)
            for r in back.rows:
                self.assertEqual(r.state, "ok", r.reason)
                self.assertGreater(r.time_us.count, 0, "an unmeasured row was kept")
            if measured:
                self.assertEqual([r.backend for r in back.rows], ["np-ret", "stops"])
                self.assertIsNotNone(back.rows[1].ratio)
            else:
                self.assertEqual(back.rows, [])

    def test_cli_and_package_rows_match_up(self) -> None:
        cli = self.tmp / "cli.json"
        run("run", "--backend", "cpu-ref", "--shape", "4x24x32", "--quiet", "--warmup-ms", "5",
            "--max-time", "0.3", "--json", cli)
        py = self.tmp / "py.json"
        fp4bench.bench({"cpu-ref": fp4bench.LibraryBackend("cpu-ref")}, [(4, 24, 32)],
                       json=py, **QUICK)
        r = rp.read_json(py).rows[0]
        self.assertEqual((r.state, r.verified), ("ok", 1))
        p = run("compare", cli, py)
        self.assertIn("1 matched", p.stdout)
        self.assertNotIn("different data", p.stderr)
        self.assertNotIn("different seeds", p.stderr)
        self.assertEqual(rp.read_json(cli).settings["order_seed"],
                         rp.read_json(py).settings["order_seed"])

    def test_wrong_callables_fail_before_timing(self) -> None:
        cache: dict[str, np.ndarray] = {}

        def ignores_its_copy(ops):  # computes R whatever the copy: as if it read copy 0
            return np.float32(ops.sign) * dq_gemm(ops)

        def stale(ops):  # the result of its first call, every time
            if "d" not in cache:
                cache["d"] = dq_gemm(ops)
            return cache["d"]

        def writes_nothing(ops):
            return None

        def zeros(ops):
            return np.zeros((ops.m, ops.n), np.float32)

        def unsupported(ops):
            raise fp4bench.Unsupported("needs sm_100")

        def crashes(ops):
            raise RuntimeError("boom\nsecond line")

        def bad_shape(ops):
            return np.zeros((ops.n, ops.m), np.float32)

        def rounds_badly(ops):
            return dq_gemm(ops) * np.float32(1.02)

        calls = {"n": 0}

        def counted(ops):
            calls["n"] += 1
            return dq_gemm(ops)

        rep = fp4bench.bench({"good": counted, "lazy": ignores_its_copy, "stale": stale,
                              "none": writes_nothing,
                              "zeros": zeros, "unsup": unsupported, "crash": crashes,
                              "shape": bad_shape, "loose": rounds_badly,
                              "tolerant": fp4bench.Backend(rounds_badly, tol_max=0.05,
                                                           tol_norm=0.05)},
                             [(6, 40, 64)], copies=4, **QUICK)
        by = {r.backend: r for r in rep.rows}
        self.assertEqual(by["good"].state, "ok")
        self.assertEqual(by["tolerant"].state, "ok")
        self.assertEqual(by["lazy"].state, "FAILED")
        self.assertIn("copy 1", by["lazy"].reason)
        self.assertIn("-A", by["lazy"].reason)
        self.assertEqual(by["stale"].state, "FAILED")
        self.assertIn("copy 0", by["stale"].reason)
        self.assertIn("NaN/Inf", by["none"].reason)
        self.assertIn("all zeros", by["zeros"].reason)
        self.assertEqual((by["unsup"].state, by["unsup"].reason), ("unsupported", "needs sm_100"))
        self.assertEqual(by["crash"].reason, "verification: boom second line")
        self.assertIn("expected [6, 40]", by["shape"].reason)
        self.assertIn("error max", by["loose"].reason)
        for name in ("lazy", "stale", "none", "zeros", "unsup", "crash", "shape", "loose"):
            self.assertEqual(by[name].time_us.count, 0, name)
            self.assertIsNone(by[name].ratio)
        # copies 1 and 0 verified, timed, then every copy verified again
        g = by["good"]
        self.assertEqual(g.verified_copies, 4)
        self.assertGreaterEqual(calls["n"], 2 + g.time_us.count + 4)
        self.assertIsNotNone(by["tolerant"].ratio)

    def test_setup_teardown_and_state(self) -> None:
        seen: dict[str, object] = {}

        def setup(problem: fp4bench.Problem):
            seen["copies"] = problem.copies
            seen["signs"] = [o.sign for o in problem.operands]
            np.testing.assert_array_equal(problem.a_odd.codes, problem.a.codes ^ 0x88)
            for o in problem.operands:
                o.extra["bT"] = np.ascontiguousarray(o.b_dq.T)
            return {"alpha": problem.alpha}

        def run_(ops):
            return np.float32(ops.state["alpha"]) * (ops.a_dq @ ops.extra["bT"])

        def teardown(state):
            seen["torn"] = state

        rep = fp4bench.bench({"s": fp4bench.Backend(run_, setup=setup, teardown=teardown,
                                                    variant=lambda s: "v1")},
                             [(3, 16, 32)], copies=3, **QUICK)
        self.assertEqual(rep.rows[0].state, "ok", rep.rows[0].reason)
        self.assertEqual(rep.rows[0].variant, "v1")
        self.assertEqual(seen["copies"], 3)
        self.assertEqual(seen["signs"], [1.0, -1.0, 1.0])
        self.assertIn("alpha", seen["torn"])
        self.assertGreaterEqual(rep.rows[0].prepare_ms, 0.0)

    def test_library_backend(self) -> None:
        rep = fp4bench.bench({"cpu-ref": fp4bench.LibraryBackend("cpu-ref")}, [(5, 16, 48)],
                             **QUICK)
        r = rep.rows[0]
        self.assertEqual((r.state, r.verified, r.copies), ("ok", 1, 1))
        self.assertEqual(r.err_max, 0.0)
        self.assertEqual(r.bytes, fp4bench.libbackend.bytes_moved("cpu-ref", 5, 16, 48))

    def test_engine_seeds_and_order(self) -> None:
        # settings.order_seed of `fp4bench run --seed 1` (the CLI derives it so)
        self.assertEqual(bm.derive_order_seed(1), 13337801915273996587)
        o1, o2 = bm.RoundOrder(12345), bm.RoundOrder(12345)
        seqs = [o1.shuffle(4) for _ in range(50)]
        self.assertEqual(seqs, [o2.shuffle(4) for _ in range(50)])
        self.assertTrue(all(sorted(s) == [0, 1, 2, 3] for s in seqs))
        self.assertGreater(len({tuple(s) for s in seqs}), 10)
        self.assertEqual(bm.operand_seed(1, 16, 2048, 6144, 0),
                         bm.operand_seed(1, 16, 2048, 6144, 1) - 1)
        a1 = fp4bench.make_operand("gaussian", 4, 32, 99)
        a2 = fp4bench.make_operand("gaussian", 4, 32, 99)
        np.testing.assert_array_equal(a1.codes, a2.codes)
        c = fp4bench.make_operand("codes", 4, 32, 5)
        self.assertEqual(np.float32(c.global_scale), np.float32(1) / np.float32(2688))
        self.assertTrue(((c.scales >= 1) & (c.scales <= 0x7E)).all())
        self.assertEqual(fp4bench.make_operand("outliers", 3, 64, 1).shape, (3, 64))

    def test_rules(self) -> None:
        self.assertEqual(bm.copies_for(50e6, 140e9, 7.2e6, False, True), 21)
        self.assertEqual(bm.copies_for(50e6, 140e9, 7.2e6, True, True), 1)
        self.assertEqual(bm.copies_for(50e6, 140e9, 100.0, False, True), 1024)
        self.assertEqual(bm.copies_for(50e6, 140e9, 7.2e6, False, False), 1)
        self.assertEqual(bm.batch_for(21, 5.0), 84)
        self.assertEqual(bm.batch_for(1024, 5.0), 1024)
        self.assertEqual(bm.batch_for(2, 5000.0), 4)   # 2 reps: 20 ms
        self.assertEqual(bm.batch_for(2, 50000.0), 2)  # never fewer than one pass

    def test_stopping_rule_and_presets(self) -> None:
        rep = fp4bench.bench({"a": dq_gemm}, [(2, 16, 16)], min_samples=25, noise=1.0,
                             **QUICK)
        self.assertGreaterEqual(rep.rows[0].time_us.count, 25)
        self.assertFalse(rep.rows[0].timed_out)
        rep = fp4bench.bench({"a": dq_gemm}, [(2, 16, 16)], noise=0.0, max_time=0.05,
                             device="cpu", warmup_ms=0, progress=False)
        self.assertTrue(rep.rows[0].timed_out)
        listed = run("list", "--preset", "seed").stdout.split("\n")
        want = [tuple(line.split()) for line in listed if line.strip()]
        got = [(str(c.m), str(c.n), str(c.k), c.label) for c in fp4bench.preset("seed")]
        self.assertEqual(got, want)
        with self.assertRaises(fp4bench.Fp4Error):
            fp4bench.preset("no-such-preset")
        with self.assertRaises(ValueError):
            fp4bench.bench({"a b": dq_gemm}, [(2, 16, 16)], **QUICK)
        with self.assertRaises(ValueError):
            fp4bench.bench({"a": dq_gemm}, [(2, 16, 15)], **QUICK)
        with self.assertRaises(ValueError):
            fp4bench.bench({"a": dq_gemm}, [(2, 16, 16)], baseline="b", **QUICK)


if __name__ == "__main__":
    unittest.main()
