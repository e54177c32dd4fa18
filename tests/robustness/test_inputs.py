"""Regression tests of issue 15's bad inputs: each is refused in one line naming the problem and the fix,
with the documented exit code, in bounded time and memory."""
from __future__ import annotations

import math
import re
import resource
import time
from pathlib import Path

import pytest

from gpuadvisor import api, exitcodes
from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import load_cluster

from .._cli import one_line
from .conftest import COUNTS

TWO_NODES = "nodes:\n  - gpus: 2x A40\n  - gpus: 2x A40\n"


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    COUNTS["inputs"] += 1
    rc = main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


# ------------------------------------------------------------------ cluster files

CLUSTER_CASES = {
    "negative count": ("nodes:\n  - gpus: -2x A40\n", ["nodes[0].gpus", "count"]),
    "zero count": ("nodes:\n  - gpus: 0x A40\n", ["count"]),
    "fractional count": ("nodes:\n  - gpus: 1.5x A40\n", ["count"]),
    "negative bandwidth": (TWO_NODES + "network: {bandwidth_gb_per_s: -1.2, latency_us: 10}\n",
                           ["network.bandwidth_gb_per_s", "greater than 0"]),
    "zero bandwidth": (TWO_NODES + "network: {bandwidth_gb_per_s: 0, latency_us: 10}\n", ["bandwidth_gb_per_s"]),
    "nan bandwidth": (TWO_NODES + "network: {bandwidth_gb_per_s: .nan, latency_us: 10}\n", ["finite"]),
    "inf bandwidth": (TWO_NODES + "network: {bandwidth_gb_per_s: .inf, latency_us: 10}\n", ["bandwidth_gb_per_s"]),
    "negative latency": (TWO_NODES + "network: {bandwidth_gb_per_s: 1, latency_us: -3}\n", ["latency_us"]),
    "negative link bandwidth": ("nodes:\n  - gpus: 2x A40\n    topology: {link: PXB, bandwidth_gb_per_s: -4}\n",
                                ["topology", "bandwidth_gb_per_s"]),
    "negative memory": ("nodes:\n  - gpus: [{gpu: A40, memory_gib: -5}]\n", ["memory_gib"]),
    "zero tflops": ("nodes:\n  - gpus: 2x A40\n    device_rates: {tflops_bf16: 0}\n", ["tflops_bf16"]),
    "huge tflops": ("nodes:\n  - gpus: 2x A40\n    device_rates: {tflops_bf16: 1e300}\n", ["tflops_bf16"]),
    "nan memory bandwidth": ("nodes:\n  - gpus: 2x A40\n    device_rates: {memory_bandwidth_gb_per_s: .nan}\n",
                             ["memory_bandwidth_gb_per_s"]),
    "negative ram": ("nodes:\n  - cpu_ranks: 2\n    cpu: {ram_gib: -1}\n", ["ram_gib"]),
    "zero cpu ranks": ("nodes:\n  - cpu_ranks: 0\n    cpu: {ram_gib: 8}\n", ["cpu_ranks"]),
    "too many gpus in a node": ("nodes:\n  - gpus: 100000x A40\n", ["count"]),
    "too many nodes": ("nodes:\n  - gpus: 8x A40\n    count: 1000000\nnetwork: 1gbe\n", ["count"]),
    "duplicate top-level key": ("nodes:\n  - gpus: 2x A40\nnodes:\n  - gpus: 4x A40\n", ["'nodes' appears twice",
                                                                                       "line 3"]),
    "duplicate nested key": ("nodes:\n  - gpus: 2x A40\n    gpus: 4x A40\n", ["'gpus' appears twice"]),
    "unknown key": ("nodes:\n  - gpus: 2x A40\n    gpu_count: 4\n", ["unknown field"]),
    "bad pcie gen": ("nodes:\n  - gpus: 2x A40\n    pcie: {gen: 99}\n", ["pcie.gen"]),
    "bad port": ("nodes:\n  - gpus: 2x A40\n    access: {host: h, port: 70000}\n", ["port"]),
}


@pytest.mark.parametrize("case", sorted(CLUSTER_CASES))
def test_bad_cluster_file_is_one_line(case, tmp_path, capsys):
    text, needles = CLUSTER_CASES[case]
    f = tmp_path / "c.yaml"
    f.write_text(text)
    rc, out, err = cli(["suggest", "--model", "350M", "--cluster", str(f)], capsys)
    assert rc == exitcodes.USAGE and out == ""
    one_line(err, "c.yaml", *needles)


def test_alias_bomb_is_refused_fast_in_bounded_memory(tmp_path, capsys):
    levels = ["a: &a [" + ",".join(['"x"'] * 9) + "]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        levels.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(levels) + "\nnodes: [*i]\n")
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    rc, _, err = cli(["suggest", "--model", "350M", "--cluster", str(f)], capsys)
    assert time.monotonic() - t0 < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024  # KiB: < 200 MB more
    assert rc == exitcodes.USAGE
    one_line(err, "bomb.yaml", "aliases")


def test_many_aliases_are_refused(tmp_path):
    f = tmp_path / "many.yaml"
    f.write_text("x: &x 1\nnodes:\n  - gpus: 2x A40\nnotes: [" + ",".join(["*x"] * 500) + "]\n")
    with pytest.raises(UserError, match="aliases"):
        load_cluster(f)


def test_binary_and_undecodable_files_are_named(tmp_path, capsys):
    binf = tmp_path / "cluster.bin"
    binf.write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)))
    rc, _, err = cli(["suggest", "--model", "350M", "--cluster", str(binf)], capsys)
    assert rc == exitcodes.USAGE
    one_line(err, str(binf), "binary")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"nodes:\n  - gpus: 2x A40\nname: caf\xe9\n")
    rc, _, err = cli(["suggest", "--model", "350M", "--cluster", str(latin)], capsys)
    one_line(err, str(latin), "UTF-8")


def test_oversized_file_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(64 * 1024 * 1024)
    with pytest.raises(UserError, match="MiB"):
        load_cluster(big)


def test_a_large_but_real_cluster_expands_quickly(tmp_path):
    f = tmp_path / "big.yaml"
    f.write_text("nodes:\n  - gpus: 8x A100-SXM4-80GB\n    topology: NV12\n    count: 2048\nnetwork: ib-hdr\n")
    t0 = time.monotonic()
    c = load_cluster(f)
    assert c.num_devices == 16384 and time.monotonic() - t0 < 10


# ------------------------------------------------------------------ CLI flags

FLAG_CASES = [
    (["suggest", "--model", "350M", "--cpu-ranks", "0"], ["--cpu-ranks", "from 1"]),
    (["suggest", "--model", "350M", "--cpu-ranks", "-3"], ["--cpu-ranks"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--cpu-ranks", "2"], ["--cpu-ranks", "--preset"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--confirm", "0"], ["--confirm"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--budget", "3m"], ["--budget", "--confirm"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--storage", "x.db"], ["--storage", "--confirm"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--confirm", "1", "--budget", "0s"], ["duration"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--confirm", "1", "--budget", "nan"], ["duration"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--global-batch", "99999999999999999999"],
     ["--global-batch"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--seq-len", "0"], ["--seq-len"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--token-budget", "nan"], ["--token-budget"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--token-budget", "-5"], ["--token-budget"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--top", "0"], ["--top"]),
    (["suggest", "--model", "", "--preset", "a6000-4x-pcie"], ["--model"]),
    (["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--steps", "0", "--confirm", "1"], ["--steps"]),
    (["predict", "--model", "350M", "--preset", "a6000-4x-pcie", "--plan", ""], ["empty plan"]),
    (["predict", "--model", "350M", "--preset", "a6000-4x-pcie", "--plan", "dp=2,dp=4"], ["'dp' is given twice"]),
    (["predict", "--model", "350M", "--preset", "a6000-4x-pcie", "--plan", "dp=two"], ["dp"]),
    (["predict", "--model", "350M", "--preset", "a6000-4x-pcie", "--plan", "dp=999999999999"], ["ranks"]),
    (["study", "--models", "L2-H32-A4", "--preset", "cpu-2ranks", "--steps", "0", "--dry-run"], ["--steps"]),
    (["study", "--models", "L2-H32-A4", "--preset", "cpu-2ranks", "--cpu-ranks", "2", "--dry-run"], ["--cpu-ranks"]),
]


@pytest.mark.parametrize("argv, needles", FLAG_CASES, ids=[" ".join(a[3:]) or a[0] for a, _ in FLAG_CASES])
def test_bad_flag_is_one_line_usage_error(argv, needles, capsys):
    rc, out, err = cli(argv, capsys)
    assert rc == exitcodes.USAGE
    one_line(err, *needles)


def test_predict_of_an_infeasible_plan_exits_nothing_fits_with_why(capsys):
    rc, out, err = cli(["predict", "--model", "7B", "--preset", "workstation-2x4090", "--plan", "dp=2,mb=1"], capsys)
    assert rc == exitcodes.NOTHING_FITS and "INFEASIBLE" in out
    assert "does not fit" in err and "memory" in err and err.count("\n") == 1


def test_nothing_fits_and_run_failed_codes():
    from gpuadvisor.cli.suggest_cmd import _exit_code

    class R:
        def __init__(self, top):
            self.ranking = type("Rk", (), {"top": top})()

    class C:
        winner = None

    assert _exit_code(R([]), None) == exitcodes.NOTHING_FITS
    assert _exit_code(R([1]), None) == exitcodes.OK
    assert _exit_code(R([1]), C()) == exitcodes.RUN_FAILED  # --confirm ran and no trial succeeded


# ------------------------------------------------------------------ output paths


@pytest.mark.parametrize("argv", [
    ["suggest", "--model", "350M", "--preset", "a6000-4x-pcie", "--emit", "{file}/sub"],
    ["measurements", "export", "--out", "{file}/rows.jsonl"],
    ["measurements", "export", "--out", "{dir}"],
    ["probe", "--save", "{file}/c.yaml"],
    ["study", "--models", "L2-H32-A4", "--preset", "cpu-2ranks", "--out", "{file}/s", "--no-plots"],
])
def test_unusable_output_path_is_one_line(argv, tmp_path, capsys, home):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    argv = [a.format(file=afile, dir=tmp_path) for a in argv]
    rc, out, err = cli(argv, capsys)
    assert rc == exitcodes.USAGE
    one_line(err, str(tmp_path))


# ------------------------------------------------------------------ Python API

API_CASES = {
    "suggest(123)": lambda: api.suggest(123),
    "suggest(top='3')": lambda: api.suggest("350M", preset="a6000-4x-pcie", top="3"),
    "suggest(cluster=42)": lambda: api.suggest("350M", cluster=42),
    "predict(plan=dict)": lambda: api.predict("350M", plan={"dp": 2}, preset="a6000-4x-pcie"),
    "predict(plan=3.5)": lambda: api.predict("350M", plan=3.5, preset="a6000-4x-pcie"),
    "predict(plan='')": lambda: api.predict("350M", plan="", preset="a6000-4x-pcie"),
    "confirm(top_k='3')": lambda: api.confirm("350M", preset="a6000-4x-pcie", top_k="3"),
    "confirm(budget_s=nan)": lambda: api.confirm("350M", preset="cpu-2ranks", budget_s=math.nan),
    "confirm(budget_s=inf)": lambda: api.confirm("350M", preset="cpu-2ranks", budget_s=math.inf),
    "confirm(budget_s=-1)": lambda: api.confirm("350M", preset="cpu-2ranks", budget_s=-1.0),
    "make_workload(None)": lambda: api.make_workload(None),
    "resolve_cluster(preset=1)": lambda: api.resolve_cluster(preset=1),
}


@pytest.mark.parametrize("case", sorted(API_CASES))
def test_api_type_mistakes_are_user_errors(case, home):
    COUNTS["inputs"] += 1
    with pytest.raises(UserError) as exc:
        API_CASES[case]()
    assert "\n" not in str(exc.value)
    assert not (home / "studies.db").exists()  # refused before any study was opened


def test_confirm_of_a_gpu_preset_on_a_gpu_less_host_refuses_before_any_trial(home, monkeypatch):
    from gpuadvisor.trials import hostcheck

    monkeypatch.setattr(hostcheck, "local_gpu_count", lambda: 0)
    COUNTS["inputs"] += 1
    with pytest.raises(UserError, match="has GPUs but this host has none"):
        api.confirm("350M", preset="a6000-4x-pcie", top_k=1, budget_s=60.0)
    assert not (home / "studies.db").exists() and not (home / "trials").exists()


# ------------------------------------------------------------------ hints name only real flags and commands


def _messages() -> list[tuple[str, str]]:
    """(file, text) of every string literal inside a raised error or a printed hint in src/gpuadvisor."""
    import ast

    src = Path(__file__).resolve().parents[2] / "src" / "gpuadvisor"
    out = []
    for path in src.rglob("*.py"):
        if "tui" in path.parts or "trainers" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                    "UserError", "ProbeError", "ValueError", "ArgumentTypeError", "print"):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        out.append((path.name, sub.value))
    return out


#: Scripts with their own command line (run on a node or by a launcher), not `gpuadvisor` subcommands.
NODE_SIDE = {"nodeside.py", "guard.py", "locallaunch.py"}


def _known_flags() -> set[str]:
    import argparse

    from gpuadvisor.cli import build_parser

    flags: set[str] = set()

    def walk(p: argparse.ArgumentParser) -> None:
        for a in p._actions:
            flags.update(a.option_strings)
            if isinstance(a, argparse._SubParsersAction):
                for child in a.choices.values():
                    walk(child)

    walk(build_parser())
    return flags


def test_hints_name_only_flags_and_commands_that_exist():
    from gpuadvisor.cli import COMMANDS

    from gpuadvisor.launch import readback

    flags = _known_flags()
    # readback.py and megatron_shape.py quote the flags of the user's own Megatron-LM file back to them (and
    # check_config.py the shape flags it lacks), and plan.py names the Megatron flag a plan field stands for: those
    # are Megatron's (read back by readback.py), not ours
    megatron = readback._MEG_VALUED | readback._MEG_SWITCHES
    foreign = {"readback.py": megatron, "plan.py": megatron, "megatron_shape.py": megatron,
               "check_config.py": megatron}
    bad = []
    for fname, text in _messages():
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text):
            if flag not in flags and fname not in NODE_SIDE and flag not in foreign.get(fname, set()):
                bad.append(f"{fname}: {flag}")
        for cmd in re.findall(r"`gpuadvisor ([a-z-]+)", text):
            if cmd not in COMMANDS:
                bad.append(f"{fname}: gpuadvisor {cmd}")
    assert not bad, sorted(set(bad))
