"""The CLI's bad-input paths: one line on stderr naming the problem and the fix, non-zero exit."""
import subprocess
import sys

import pytest

from gpuadvisor.cli import main


@pytest.mark.parametrize("argv, needle", [
    (["suggest", "--model", "3.3B", "--preset", "a6000-4x-pcie"], "unknown model size '3.3B'"),
    (["suggest", "--model", "1.5B", "--preset", "no-such-preset"], "no-such-preset"),
    (["suggest", "--model", "1.5B", "--preset", "a6000-4x-pcie", "--global-batch", "0"], "--global-batch"),
    (["predict", "--model", "1.5B", "--preset", "a6000-4x-pcie", "--plan", "dp=2,bogus=1"], "unknown plan key"),
    (["probe", "--topo-file", "/nonexistent/topo.txt"], "/nonexistent/topo.txt"),
    (["suggest", "--model", "1.5B", "--cluster", "/nonexistent/cluster.yaml"], "not found; write one"),
    (["suggest", "--model", "1.5B", "--cluster", "/"], "cluster file '/' is a folder; give the YAML/JSON file"),
    (["predict", "--model", "1.5B", "--preset", "a6000-4x-pcie", "--from", "/"], "--from '/' is a folder; give a"),
    (["predict", "--model", "1.5B", "--preset", "a6000-4x-pcie", "--plan", "dp=99"],
     "plan uses 99 devices (dp x tp x pp x cp) but cluster 'a6000-4x-pcie' has 1 x 4"),
    (["predict", "--model", "1.5B", "--preset", "a6000-4x-pcie", "--from", "/nonexistent/ds.json"],
     "--from file '/nonexistent/ds.json' not found; give a ds_config.json"),
    (["predict", "--model", "llama-7b", "--preset", "dgx-a100-8x", "--plan", "dp=8,zero=3,mb=1,m=1",
      "--precision", "fp8"], "no FP8 tensor cores"),
    (["predict", "--model", "llama-7b", "--preset", "hgx-h100-8x", "--plan", "dp=8,zero=3,mb=1,m=1",
      "--attention-kernel", "fa3"], "--attention-kernel"),
    (["suggest", "--model", "llama-7b", "--preset", "hgx-h100-8x", "--precision", "fp8", "--finetune", "qlora"],
     "QLoRA with --precision fp8 is not supported"),
])
def test_bad_input_is_one_line(argv, needle, capsys):
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert len(err) == 1 and err[0].startswith("gpuadvisor: error: ") and needle in err[0], err


def test_cluster_file_error_names_line_and_field(tmp_path, capsys):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("name: x\nnodes:\n  - name: a\n    gpus: 4x A7000\n")
    assert main(["suggest", "--model", "1.5B", "--cluster", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 4" in err and "nodes[0].gpus" in err and "A7000" in err


def test_model_that_fits_nowhere_says_the_smallest_change(capsys):
    rc = main(["suggest", "--model", "175B", "--preset", "workstation-2x4090"])
    out = " ".join(capsys.readouterr().out.split())  # rich wraps at the terminal width
    assert rc == 3
    # ZeRO-3 offload keeps only the gathered layers on the GPU (DeepSpeed's estimator), so host RAM is what runs out
    assert "Even ZeRO-3 offload needs" in out and "GiB of host RAM per node" in out and "add host memory or GPUs" in out
    assert "above the 109 GiB usable of 128 GiB (85%" in out  # the preset's RAM and what of it is usable
    assert "out of host memory for offload" in out


def test_output_into_a_closed_pipe_is_quiet():
    proc = subprocess.run(f"{sys.executable} -m gpuadvisor suggest --model 1.5B --preset a6000-4x-pcie | head -1",
                          shell=True, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() and "Traceback" not in proc.stderr



@pytest.mark.parametrize("plan, says", [
    # a check across fields reads as its own message, without pydantic's "Value error, " or a made-up field
    ("dp=8,zero=1,zero_impl=fsdp", "invalid plan 'dp=8,zero=1,zero_impl=fsdp': zero_impl fsdp shards like ZeRO-2/3"),
    # a bad field is named
    ("dp=8,mb=0", "invalid plan 'dp=8,mb=0': micro_batch_size: Input should be greater than or equal to 1"),
    # optimizer-only offload is stage 3's choice; offload=optimizer already sets it
    ("dp=8,zero=2,offload=true,offload_param=false", "zero_offload_param=false (optimizer-only offload) is a choice of "
                                                     "ZeRO-3 with zero_offload"),
    ("dp=8,zero=3,offload=optimizer,offload_param=true", "plan key 'offload_param' is given twice"),
    ("dp=8,zero=3,offload_param=false,offload=all", "plan key 'offload_param' is given twice"),
    ("dp=8,zero=3,offload=cpu", "offload=cpu is not an offload mode; write offload=optimizer"),
])
def test_plan_errors_read_as_the_check_says(plan, says, capsys):
    assert main(["predict", "--model", "1.5B", "--preset", "dgx-a100-8x", "--plan", plan]) != 0
    err = capsys.readouterr().err.strip()
    assert says in err and "Value error" not in err and "plan: " not in err, err
