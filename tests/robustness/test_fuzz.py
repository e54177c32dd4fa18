"""Fuzz the boundary: hypothesis-generated cluster files, model specs, plan strings and command lines.

Every input must end in a result or a typed one-line error (UserError through the API, exit code 2/3 with
one stderr line through the CLI), in bounded time. Any other exception is a bug. Example counts are kept
small enough for a shared 2-core machine; raise them with GPUADVISOR_FUZZ_EXAMPLES for a longer run.
"""
from __future__ import annotations

import io
import math
import os
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuadvisor import api, exitcodes
from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.hardware.cluster_file import load_cluster
from gpuadvisor.schemas import Cluster

from .conftest import COUNTS

N = int(os.environ.get("GPUADVISOR_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=N, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
LIMIT_S = 10.0

numbers = st.one_of(st.integers(-10**6, 10**6), st.integers(-10**30, 10**30),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 1, 2, 4, 8, -1, 0.5, 1e300]))
gpu_names = st.sampled_from(["A40", "A6000", "RTX 4090", "a100-sxm-40gb", "H100", "A7000", "cpu", "", "NVIDIA A40"])
gpus_text = st.one_of(
    st.builds(lambda n, g: f"{n}x {g}", st.integers(-5, 2000), gpu_names),
    st.builds(lambda n, g: f"{n}{g}", st.sampled_from(["-2x ", "1.5x ", "x ", "2 x", "0x", "+3x "]), gpu_names),
    gpu_names, st.text(max_size=12))
scalars = st.one_of(numbers, st.text(max_size=10), st.booleans(), st.none())
node = st.fixed_dictionaries({}, optional={
    "gpus": st.one_of(gpus_text, st.lists(st.one_of(gpu_names, st.fixed_dictionaries(
        {"gpu": gpu_names}, optional={"memory_gib": numbers, "pcie_gen": numbers})), max_size=4)),
    "count": st.one_of(st.integers(-3, 40), numbers),
    "cpu_ranks": st.one_of(st.integers(-2, 8), numbers),
    "cpu": st.fixed_dictionaries({}, optional={"ram_gib": numbers, "cores": numbers, "sockets": numbers}),
    "topology": st.one_of(st.sampled_from(["PXB", "NV4", "PIX", "SYS", "SHM", "bogus"]), st.fixed_dictionaries(
        {}, optional={"link": st.sampled_from(["PXB", "NV12"]), "bandwidth_gb_per_s": numbers,
                      "latency_us": numbers})),
    "device_rates": st.fixed_dictionaries({}, optional={"tflops_bf16": numbers, "tflops_fp32": numbers,
                                                         "memory_bandwidth_gb_per_s": numbers}),
    "name": st.one_of(st.text(max_size=8), numbers),
    "typo_field": scalars,
})
network = st.one_of(st.sampled_from(["1gbe", "10gbe", "ib-hdr", "nonsense"]), st.fixed_dictionaries(
    {}, optional={"bandwidth_gb_per_s": numbers, "latency_us": numbers, "link": st.sampled_from(["25gbe", "x"]),
                  "link_speed_gbit_per_s": numbers}))
valid_node = st.fixed_dictionaries(
    {"gpus": st.builds(lambda n, g: f"{n}x {g}", st.integers(1, 8), st.sampled_from(["A40", "A6000", "RTX 4090"]))},
    optional={"topology": st.sampled_from(["PXB", "PIX", "SYS", "NV4"]), "count": st.integers(1, 4),
              "device_rates": st.fixed_dictionaries({}, optional={"tflops_bf16": st.floats(0.1, 2000)}),
              "cpu": st.fixed_dictionaries({"ram_gib": st.floats(1, 2048)})})
cluster_doc = st.one_of(
    st.fixed_dictionaries({"nodes": st.one_of(st.lists(node, max_size=3), scalars)},
                          optional={"network": network, "name": scalars, "defaults": node}),
    st.fixed_dictionaries({"nodes": st.lists(valid_node, min_size=1, max_size=3),
                           "network": st.sampled_from(["1gbe", "10gbe", "ib-hdr", "25gbe"])}))


def _typed(fn):
    """Run fn; only a result or a one-line UserError is allowed, within LIMIT_S."""
    COUNTS["inputs"] += 1
    t0 = time.monotonic()
    try:
        return fn()
    except UserError as exc:
        assert "\n" not in str(exc), str(exc)
        return exc
    except Exception:
        COUNTS["found"] += 1
        raise
    finally:
        assert time.monotonic() - t0 < LIMIT_S, "an input took too long"


def _write(text: str, suffix: str = ".yaml") -> Path:
    fd, name = tempfile.mkstemp(suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(name)


@FUZZ
@given(doc=cluster_doc, as_json=st.booleans())
def test_fuzzed_cluster_files_load_or_fail_typed(doc, as_json):
    import json

    if as_json:
        text = json.dumps(doc, default=str).replace("NaN", "NaN")
    else:
        text = yaml.safe_dump(doc, allow_unicode=True)
    path = _write(text, ".json" if as_json else ".yaml")
    try:
        out = _typed(lambda: load_cluster(path))
        COUNTS["fuzz cluster files accepted" if isinstance(out, Cluster) else "fuzz cluster files refused"] += 1
        if isinstance(out, Cluster):
            for d in (d for n in out.nodes for d in n.devices):  # whatever loads is physically sensible
                assert d.memory_bytes > 0 and math.isfinite(d.peak_tflops_bf16) and d.peak_tflops_bf16 > 0
            if out.network is not None:
                assert out.network.bandwidth_gb_per_s > 0 and math.isfinite(out.network.bandwidth_gb_per_s)
    finally:
        path.unlink()


@FUZZ
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("latin-1"))))
def test_arbitrary_text_as_cluster_file_fails_typed(text):
    path = _write("")
    path.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
    try:
        _typed(lambda: load_cluster(path))
    finally:
        path.unlink()


small_cluster = st.fixed_dictionaries({"nodes": st.lists(st.fixed_dictionaries(
    {"gpus": st.builds(lambda n, g: f"{n}x {g}", st.integers(1, 2), st.sampled_from(["A40", "A6000", "RTX 4090"]))},
    optional={"device_rates": st.fixed_dictionaries({}, optional={"tflops_bf16": numbers}),
              "topology": st.fixed_dictionaries({"link": st.just("PXB")}, optional={"bandwidth_gb_per_s": numbers})}),
    min_size=1, max_size=2)}, optional={"network": network})


@settings(FUZZ, max_examples=max(10, N // 3))
@given(doc=small_cluster, model=st.sampled_from(["125M", "L2-H32-A4", "350M"]))
def test_fuzzed_small_clusters_rank_or_fail_typed(doc, model):
    path = _write(yaml.safe_dump(doc))
    try:
        out = _typed(lambda: api.suggest(model, cluster=str(path), top=2))
        COUNTS["fuzz clusters ranked" if not isinstance(out, UserError) else "fuzz clusters refused"] += 1
    finally:
        path.unlink()


model_text = st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True)),
              st.sampled_from(["M", "B", "m", "T", "", "K"])),
    st.builds(lambda a, b, c: f"L{a}-H{b}-A{c}", st.integers(0, 20000), st.integers(0, 10**7), st.integers(0, 300)),
    st.sampled_from(["gpt2", "gpt2-xl", "llama-7b", "resnet18", "", " ", "/nonexistent/config.json", "../x.json"]),
    st.text(max_size=20))


@FUZZ
@given(model=model_text, seq=st.one_of(st.none(), st.integers(-5, 10**7)),
       batch=st.one_of(st.none(), st.integers(-5, 10**12)))
def test_fuzzed_model_specs_resolve_or_fail_typed(model, seq, batch):
    _typed(lambda: api.make_workload(model, seq_len=seq, global_batch=batch))


plan_keys = st.sampled_from(["dp", "tp", "pp", "zero", "mb", "m", "nodes", "gpn", "offload", "recompute",
                             "schedule", "bogus", "dp ", "", "zero_stage", "micro_batch_size"])
plan_vals = st.one_of(st.integers(-3, 70), st.sampled_from(["true", "false", "1f1b", "x", "", "1e9", "nan",
                                                            "99999999999999999999"]))
real_plan = st.builds(lambda dp, tp, pp, mb, m, z: f"dp={dp},tp={tp},pp={pp},mb={mb},m={m},zero={z}",
                      st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
                      st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]), st.sampled_from([0, 1, 2, 3]))
plan_text = st.one_of(
    st.lists(st.builds(lambda k, v: f"{k}={v}", plan_keys, plan_vals), max_size=7).map(",".join),
    st.text(max_size=40), real_plan)


@FUZZ
@given(plan=plan_text)
def test_fuzzed_plan_strings_predict_or_fail_typed(plan):
    from gpuadvisor.schemas import parse_plan

    try:
        batch = parse_plan(plan).global_batch()
    except ValueError:
        batch = None
    out = _typed(lambda: api.predict("L2-H32-A4", plan, preset="a6000-4x-pcie", global_batch=batch))
    COUNTS["fuzz plans predicted" if not isinstance(out, UserError) else "fuzz plans refused"] += 1


# Any valid value, up to the bounds (ranking work no longer grows with the batch: test_scale.py); values above
# the bounds are refused.
flag_values = st.one_of(st.integers(-3, 4096).map(str), st.integers(4097, 2**31).map(str),
                        st.integers(2**31 + 1, 10**30).map(str),
                        st.sampled_from(["0", "-1", "nan", "inf", "", "1e400",
                                                                           "abc", "3m", "0s", "99999999999999999999"]))
suggest_flags = st.lists(st.tuples(st.sampled_from(["--cpu-ranks", "--top", "--global-batch", "--seq-len",
                                                    "--token-budget", "--price-per-gpu-hour", "--budget", "--steps",
                                                    "--what-if", "--objective", "--precision"]), flag_values),
                         max_size=3)


def _run_cli(argv: list[str]) -> tuple[int, str]:
    COUNTS["inputs"] += 1
    err, out = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with redirect_stderr(err), redirect_stdout(out):
        rc = main(argv)
    assert time.monotonic() - t0 < LIMIT_S * 3, argv
    return rc, err.getvalue()


@settings(FUZZ, max_examples=max(10, N // 2))
@given(flags=suggest_flags, model=st.sampled_from(["125M", "L2-H32-A4", ""]))
def test_fuzzed_suggest_command_lines_exit_with_documented_codes(flags, model):
    argv = ["suggest", "--model", model, "--preset", "a6000-4x-pcie"] + [x for f in flags for x in f]
    if any(f == "--cpu-ranks" for f, _ in flags):
        argv.remove("--preset")
        argv.remove("a6000-4x-pcie")
        argv += ["--cluster", "/nonexistent/c.yaml"]  # never probe or fall back: only the checks run
    rc, err = _run_cli(argv)
    assert rc in (exitcodes.OK, exitcodes.USAGE, exitcodes.NOTHING_FITS), (argv, rc, err)
    if rc == exitcodes.USAGE:
        assert err.count("\n") == 1 and err.startswith("gpuadvisor: error: "), (argv, err)


@settings(FUZZ, max_examples=max(10, N // 2))
@given(plan=plan_text, model=st.sampled_from(["125M", "L2-H32-A4"]), batch=st.one_of(st.none(), flag_values))
def test_fuzzed_predict_command_lines_exit_with_documented_codes(plan, model, batch):
    argv = ["predict", "--model", model, "--preset", "a6000-4x-pcie", "--plan", plan]
    if batch is not None:
        argv += ["--global-batch", batch]
    rc, err = _run_cli(argv)
    assert rc in (exitcodes.OK, exitcodes.USAGE, exitcodes.NOTHING_FITS), (argv, rc, err)
    if rc != exitcodes.OK:
        assert err.count("\n") == 1, (argv, err)
