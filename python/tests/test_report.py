"""The JSON the package writes is the CLI's schema: it reads back with the
package and with `fp4bench compare`, and the package reads the CLI's files."""

from __future__ import annotations

import json
import math
import unittest

from _util import TmpDir, run

from fp4bench import report as rp
from fp4bench.stats import Stats, compute


def gpu_row(label: str, m: int, backend: str, median: float) -> rp.Row:
    s = compute([median * f for f in (0.999, 1.0, 1.001, 1.0, 0.9995, 1.0005, 1.0, 1.0, 1.0,
                                      1.0)])
    return rp.Row(label=label, m=m, n=2048, k=6144, backend=backend, l2="cold", timing="graph",
                  copies=21, batch=84, rotation_bytes=1.5e8, time_us=s, verified=1,
                  verify_note="max 0.003 norm 0.001 vs cuda-ref", err_max=0.003, err_norm=0.001,
                  flops=2.0 * m * 2048 * 6144, bytes=7.2e6, tflops=1.0, gbps=700.0,
                  floor_us=1.5, pct_roofline=20.0, pct_peak=-1.0, ratio=(1.5, 1.4, 1.6),
                  telemetry={"sm_clock_mhz": 1980.0, "sm_clock_min_mhz": 1965.0,
                             "mem_clock_mhz": 3201.0, "power_w": 350.5, "temp_c": 41.0,
                             "throttle_reasons": (1 << 60) + 4, "low_clock_samples": 0})


def report(rows: list[rp.Row]) -> rp.Report:
    r = rp.Report(version="0.1.0", commit="abc", started="2026-01-02T03:04:05Z", host="h",
                  command="python x.py")
    r.device.update(present=True, name="NVIDIA H200", cc_major=9, cc_minor=0, sms=132,
                    l2_bytes=52428800.0, mem_bytes=1.5e11, driver_version=13000,
                    runtime_version=12080, peak_bw_gbps=4800)
    r.settings.update(seed=(1 << 63) + 5, order_seed=(1 << 64) - 59, baseline="cublas-bf16",
                      keep_samples=True)
    r.rows = rows
    return r


class JsonRoundTrip(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = TmpDir()

    def tearDown(self) -> None:
        self.tmp.cleanup()

    def test_written_like_the_cli(self) -> None:
        """A symlink is followed and kept, a file's mode kept, a FIFO written
        into, and no temporary left behind."""
        import os
        import stat
        import threading
        r = report([gpu_row("moe-up", 16, "fp4-sm90", 7.5)])
        real = self.tmp / "real.json"  # a str path
        with open(real, "w") as f:
            f.write("old")
        os.chmod(real, 0o640)
        link = self.tmp / "link.json"
        os.symlink("real.json", link)
        r.write_json(link)
        self.assertTrue(os.path.islink(link))
        self.assertEqual(stat.S_IMODE(os.stat(real).st_mode), 0o640)
        self.assertEqual(rp.read_json(real).rows[0].backend, "fp4-sm90")
        fifo = self.tmp / "fifo.json"
        os.mkfifo(fifo)
        got = []

        def read_fifo() -> None:
            with open(fifo, encoding="utf-8") as f:
                got.append(f.read())

        reader = threading.Thread(target=read_fifo)
        reader.start()
        r.write_json(fifo)
        reader.join(10)
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode))
        self.assertIn('"fp4-sm90"', got[0] if got else "")
        left = [n for n in os.listdir(self.tmp.path) if n.startswith(".")]
        self.assertEqual(left, [])

    def test_package_round_trip(self) -> None:
        rows = [gpu_row("moe-up", 16, "fp4-sm90", 7.123456789012345),
                gpu_row("attn-tp8 é", 64, "cublas-bf16", 12.5)]
        rows[0].samples_us = [7.1, 7.2, math.nan]
        rows.append(rp.Row(label="x", m=1, n=1, k=16, backend="sgl", state="FAILED",
                           reason="verification: copy 1: output is all zeros"))
        rows.append(rp.Row(label="L" * 80, m=2, n=3, k=32, backend="fi-cudnn",
                           state="unsupported", reason="sm_120 ✓" * 100))
        r = report(rows)
        path = self.tmp / "r.json"
        r.write_json(path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertNotIn("NaN", text)
        self.assertNotIn("Infinity", text)
        doc = json.loads(text)
        self.assertEqual(doc["settings"]["seed"], str((1 << 63) + 5))
        self.assertEqual(doc["rows"][0]["telemetry"]["throttle_reasons"], str((1 << 60) + 4))
        self.assertIsNone(doc["rows"][2]["time_us"]["median"])
        self.assertEqual(len(doc["rows"][3]["label"].encode()), 63)
        self.assertLessEqual(len(doc["rows"][3]["reason"].encode()), 383)
        back = rp.read_json(path)
        self.assertEqual(back.settings["seed"], (1 << 63) + 5)
        self.assertEqual(back.rows[0].time_us.median, rows[0].time_us.median)
        self.assertEqual(back.rows[0].ratio, (1.5, 1.4, 1.6))
        self.assertEqual(back.rows[1].label, "attn-tp8 é")
        self.assertTrue(math.isnan(back.rows[0].samples_us[2]))
        self.assertTrue(math.isnan(back.rows[2].time_us.median))
        self.assertEqual(back.rows[0].telemetry["throttle_reasons"], (1 << 60) + 4)
        # the C reader: compare a file with itself
        p = run("compare", path, path)
        self.assertIn("4 matched", p.stdout)
        self.assertIn("0 regressions", p.stdout)
        self.assertEqual(p.stderr, "")

    def test_compare_sees_a_regression(self) -> None:
        old = report([gpu_row("moe-up", 16, "fp4-sm90", 7.0), gpu_row("moe-up", 16, "x", 9.0)])
        new = report([gpu_row("moe-up", 16, "fp4-sm90", 10.5), gpu_row("moe-up", 16, "x", 9.0)])
        old.write_json(self.tmp / "old.json")
        new.write_json(self.tmp / "new.json")
        p = run("compare", self.tmp / "old.json", self.tmp / "new.json", check_rc=1)
        self.assertRegex(p.stdout, r"fp4-sm90 +moe-up +16x2048x6144 .* slower")
        self.assertIn("1 regression", p.stdout)

    def test_reads_cli_json(self) -> None:
        path = self.tmp / "cli.json"
        run("run", "--backend", "cpu-ref", "--shape", "4x24x32,2x16x16", "--quiet",
            "--warmup-ms", "0", "--max-time", "0.1", "--samples", "--json", path)
        r = rp.read_json(path)
        self.assertEqual([(x.m, x.n, x.k) for x in r.rows], [(4, 24, 32), (2, 16, 16)])
        self.assertEqual(r.rows[0].verified, -1)
        self.assertEqual(r.rows[0].time_us.count, len(r.rows[0].samples_us))
        self.assertIsInstance(r.settings["order_seed"], int)
        # and writes it back in a form the CLI still reads, unchanged
        r.write_json(self.tmp / "again.json")
        p = run("compare", path, self.tmp / "again.json")
        self.assertIn("2 matched", p.stdout)
        self.assertEqual(p.stderr, "")
        self.assertEqual(rp.read_json(self.tmp / "again.json").rows[1].time_us.median,
                         r.rows[1].time_us.median)

    def test_refuses_other_schemas(self) -> None:
        head = '"schema": "fp4bench/1", "device": {}, "settings": {}'
        with self.assertRaises(rp.FormatError):
            rp.parse_json('{%s, "schema_version": 2, "rows": []}' % head)
        with self.assertRaises(rp.FormatError):
            rp.parse_json('{%s, "schema_version": 1, "rows": [{"label": "x"}]}' % head)
        self.assertEqual(rp.parse_json('{%s, "schema_version": 1, "rows": []}' % head).rows, [])
        # no schema, another one, or no device / settings: not a report
        for doc in ('{"schema_version": 1, "rows": [], "device": {}, "settings": {}}',
                    '{"schema": "fp4bench-layer/1", "schema_version": 1, "rows": [], '
                    '"device": {}, "settings": {}}',
                    '{"schema": "fp4bench/1", "schema_version": 1, "rows": [], "settings": {}}',
                    '{"schema": "fp4bench/1", "schema_version": 1, "rows": [], "device": {}}'):
            with self.assertRaises(rp.FormatError):
                rp.parse_json(doc)
        self.assertEqual(Stats().count, 0)

    def test_refuses_what_no_run_writes(self) -> None:
        """The C reader's rules: a field of the wrong type, a value no run writes, a key
        given twice or a non-JSON number is a FormatError naming the field, never a
        Python error or a silently wrong number."""
        head = '"schema": "fp4bench/1", "schema_version": 1, "device": {}, "settings": {}'
        usual = {"label": '"x"', "m": "16", "n": "64", "k": "64", "backend": '"b"',
                 "state": '"ok"', "l2": '"cold"', "timing": '"host"',
                 "time_us": '{"count": 10, "median": 35.5, "noise": 0.004}'}

        def doc(**fields: str) -> str:
            row = dict(usual, **fields)
            return '{%s, "rows": [{%s}]}' % (head, ", ".join(f'"{k}": {v}' for k, v in
                                                            row.items()))

        self.assertEqual(rp.parse_json(doc()).rows[0].m, 16)
        bad = [({"m": "null"}, "rows[0].m: expected an integer"),
               ({"m": '"16"'}, "rows[0].m: expected an integer"),
               ({"m": "16.5"}, "rows[0].m: expected an integer"),
               ({"m": "0"}, "rows[0].m: integer out of range"),
               ({"m": "9007199254740993"}, "rows[0].m: integer out of range"),
               ({"k": "65"}, "rows[0].k: not a multiple of 16"),
               ({"k": "2097152"}, "rows[0].k: above 2^20"),
               ({"label": "5"}, "rows[0].label: expected a string"),
               ({"backend": "null"}, "rows[0].backend: expected a string"),
               ({"label": '"a\\u0000b"'}, "rows[0].label: holds"),
               ({"state": '"weird"'}, "rows[0].state: expected one of"),
               ({"l2": '"lukewarm"'}, "rows[0].l2: expected one of"),
               ({"verified": "null"}, "rows[0].verified: expected an integer"),
               ({"ratio": "1.5"}, "rows[0].ratio: expected an object"),
               ({"ratio": '{"value": -1, "lo": 5, "hi": 1}'}, "rows[0].ratio: expected a positive"),
               ({"ratio": '{"value": 2, "lo": 5, "hi": 1}'}, "rows[0].ratio.hi: below lo"),
               ({"telemetry": "[1, 2]"}, "rows[0].telemetry: expected an object"),
               ({"samples_us": '["a"]'}, "rows[0].samples_us[0]: expected a positive time"),
               ({"samples_us": "[1, -2]"}, "rows[0].samples_us[1]: expected a positive time"),
               ({"time_us": '{"count": null}'}, "rows[0].time_us.count: expected an integer"),
               ({"time_us": '{"count": 10, "median": 0}'}, "rows[0].time_us.median: expected a "
                                                           "positive time"),
               ({"time_us": '{"count": 10, "median": 5, "p10": 6}'}, "rows[0].time_us.median: "
                                                                     "below p10"),
               ({"time_us": '{"count": 3, "median": 2, "noise": -0.1}'}, "noise: negative"),
               ({"time_us": '{"count": 3, "median": 1e999}'}, "not finite"),
               ({"time_us": '{"count": 3, "median": NaN}'}, "NaN is not JSON")]
        for fields, want in bad:
            with self.subTest(fields=fields):
                with self.assertRaises(rp.FormatError) as cm:
                    rp.parse_json(doc(**fields))
                self.assertIn(want, str(cm.exception))
        with self.assertRaises(rp.FormatError) as cm:
            rp.parse_json('{%s, "rows": [], "rows": []}' % head)
        self.assertIn("rows: given twice", str(cm.exception))
        with self.assertRaises(rp.FormatError) as cm:
            rp.parse_json('{"schema": "fp4bench/1", "schema_version": 1, "device": {}, '
                          '"settings": {"seed": "abc"}, "rows": []}')
        self.assertIn("settings.seed", str(cm.exception))

    def test_moe_and_gpus_fields_kept(self) -> None:
        """An MoE file's rows keep their moe and steps, a `run --gpus` file its gpus,
        read and written again; rows of several GPUs get a GPU column and row(gpu=)."""
        import os
        src = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "results", "h200",
                           "moe", "glm5-layer.json")
        with open(src, encoding="utf-8") as f:
            want = json.load(f)
        out = self.tmp / "again.json"
        rp.read_json(src).write_json(out)
        with open(out, encoding="utf-8") as f:
            got = json.load(f)
        self.assertTrue(any(r.get("steps") for r in want["rows"]))
        self.assertEqual([r.get("moe") for r in got["rows"]], [r.get("moe") for r in want["rows"]])
        self.assertEqual([r.get("steps") for r in got["rows"]],
                         [r.get("steps") for r in want["rows"]])
        rows = [gpu_row("up", 16, "fp4-sm90", 7.5), gpu_row("up", 16, "fp4-sm90", 9.5)]
        rows[1].gpu = 1
        r = report(rows)
        r.gpus = [{"index": 0, "name": "NVIDIA H200"}, {"index": 1, "name": "NVIDIA H200"}]
        r.write_json(out)
        back = rp.read_json(out)
        self.assertEqual(back.gpus, r.gpus)
        self.assertEqual(back.row("fp4-sm90", gpu=1).time_us.median, rows[1].time_us.median)
        table = back.table().splitlines()
        self.assertTrue(table[0].split()[-1] == "GPU" and table[2].split()[-1] == "1", table)

    def test_untimed_rows_have_no_time(self) -> None:
        row = rp.Row(label="v", m=16, n=64, k=64, backend="cpu-ref", l2="cold", timing="host",
                     time_us=Stats(0, 0.0), verified=-1)
        self.assertTrue(math.isnan(row.median_us))
        line = report([row]).table().splitlines()[1].split()
        self.assertEqual(line[5:8], ["-", "-", "-"])


if __name__ == "__main__":
    unittest.main()
