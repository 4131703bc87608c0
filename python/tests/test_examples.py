"""The examples run where they cannot measure: without torch (or a GPU, or the
packages they compare) each exits 2 with one clear line, never a traceback."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import unittest
from pathlib import Path

import _util  # noqa: F401

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
NAMES = ("seed_compare.py", "torch_dequant.py", "own_kernel.py", "agree_cublas.py")


@unittest.skipIf(importlib.util.find_spec("torch") is not None,
                 "torch is installed: the examples are run on the GPU machine")
class ExamplesWithoutTorch(unittest.TestCase):
    def test_clear_exit(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
        for name in NAMES:
            p = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True,
                               text=True, env=env)
            self.assertEqual(p.returncode, 2, f"{name}: {p.stderr}")
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, f"{name}: {p.stderr}")
            self.assertIn("torch", p.stderr, name)
            self.assertEqual(p.stdout, "", name)

    def test_help(self) -> None:
        for name in NAMES:
            p = subprocess.run([sys.executable, str(EXAMPLES / name), "--help"],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, f"{name}: {p.stderr}")
            self.assertIn("usage:", p.stdout)


if __name__ == "__main__":
    unittest.main()
