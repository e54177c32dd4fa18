"""The suggest path must not import torch or deepspeed (ranking has to start fast)."""
import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "deepspeed", "textual", "optuna", "sklearn", "matplotlib")

SCRIPT = r"""
import json, sys
from gpuadvisor.cli import main
rc = main(sys.argv[1:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(%r))
print(json.dumps({"rc": rc, "heavy": heavy}))
"""


@pytest.mark.parametrize("argv", [
    ["suggest", "--model", "1.5B", "--preset", "nano-cluster-2x2-a40-1gbe", "--json"],
    ["suggest", "--model", "1.5B", "--json"],
    ["predict", "--model", "350M", "--preset", "a6000-4x-pcie", "--plan", "dp=2,mb=4,m=1", "--global-batch", "8",
     "--json"],
])
def test_suggest_path_imports_no_heavy_modules(argv):
    out = subprocess.run([sys.executable, "-c", SCRIPT % (HEAVY,), *argv], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    last = json.loads(out.stdout.strip().splitlines()[-1])
    assert last["rc"] == 0
    assert last["heavy"] == [], f"suggest path imported {last['heavy']}"
