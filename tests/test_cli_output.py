"""Terminal output of the CLI through the shared rich layer: fits 80 and 120 columns, plain when piped,
no colour with NO_COLOR or TERM=dumb, what-if scenarios side by side, and the small wording/path fixes."""
from __future__ import annotations

import io
import json

import pytest

from gpuadvisor.cli import main
from gpuadvisor.cli.console import make_console
from gpuadvisor.cli.progress import LiveProgress

NANO = "nano-cluster-2x2-a40-1gbe"
COMMANDS = [
    ["suggest", "--model", "1.5B", "--preset", NANO, "--objective", "memory", "--top", "4"],
    ["suggest", "--model", "1.5B", "--preset", NANO, "--objective", "cost", "--price-per-gpu-hour", "2",
     "--token-budget", "1e10", "--top", "4"],
    ["suggest", "--model", "gpt2", "--preset", NANO, "--what-if", "nic=10gbe", "--what-if", "gpus=2x4,link=nvlink"],
    ["presets"],
    ["presets", "--full"],
    ["predict", "--model", "1.5B", "--preset", NANO, "--plan", "dp=4,zero=3,offload=true,mb=1,m=2,recompute=true"],
    ["study", "--models", "L2-H32-A4-V256-S16,100M", "--gpus", "1,2,4", "--preset", "cpu-2ranks", "--dry-run"],
    ["validate"],
]


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a[:3]))
def test_output_fits_the_width_and_is_plain_when_piped(argv, width, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(argv) in ((0, 1) if argv[0] == "validate" else (0,))  # validate: 1 when an ordering fails
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) > 3
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, too_long
    assert "\x1b" not in out and "─" not in out  # piped: no escape codes, ASCII rules
    assert all(line == line.rstrip() for line in lines)


def test_colour_only_on_a_real_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert make_console(FakeTTY()).is_terminal and make_console(FakeTTY()).color_system is not None
    assert LiveProgress("x", console=make_console(FakeTTY())).live
    monkeypatch.setenv("NO_COLOR", "1")
    assert make_console(FakeTTY()).no_color
    monkeypatch.delenv("NO_COLOR")
    monkeypatch.setenv("TERM", "dumb")  # cannot redraw: treated as no terminal, no live line
    dumb = make_console(FakeTTY())
    assert not dumb.is_terminal and dumb.color_system is None
    assert not LiveProgress("x", console=dumb).live


def test_what_if_flags_are_compared_side_by_side_not_merged(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    argv = ["suggest", "--model", "gpt2", "--preset", NANO, "--what-if", "nic=10gbe", "--what-if", "gpus=2x4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "What-if nic=10gbe" in out and "What-if gpus=2x4" in out and "What-if comparison" in out
    table = out.split("What-if comparison")[1].splitlines()
    assert [line.split()[0] for line in table[3:6]] == ["baseline", "nic=10gbe", "gpus=2x4"]
    assert "[nic=10gbe] [gpus=2x4]" not in out  # each scenario changes one thing, not both
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["spec"] for s in doc["what_if"]] == ["nic=10gbe", "gpus=2x4"]
    assert doc["what_if"][0]["cluster"]["name"].endswith("[nic=10gbe]")
    assert main([*argv, "--emit", "x"]) == 2
    assert "several --what-if scenarios" in capsys.readouterr().err


def test_emit_path_has_no_double_slash(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    target = f"{tmp_path}/launch/"
    assert main(["suggest", "--model", "gpt2", "--preset", NANO, "--emit", target]) == 0
    out = capsys.readouterr().out
    assert f"bash {tmp_path}/launch/launch.sh" in out and "//" not in out.split("wrote launch files")[1]


def test_study_name_needs_confirm(capsys):
    assert main(["suggest", "--model", "gpt2", "--preset", NANO, "--study-name", "x"]) == 2
    assert "--study-name only applies with --confirm" in capsys.readouterr().err


def test_trial_status_coloured_on_a_terminal_only(monkeypatch):
    from gpuadvisor.cli.console import emit
    from gpuadvisor.schemas import parse_plan
    from gpuadvisor.trials.render import confirm_view
    from gpuadvisor.trials.schemas import ConfirmResult, TrialRow

    plan = parse_plan("dp=2,mb=4")
    rows = [TrialRow(number=i, trial_id=f"t{i}", plan=plan, plan_str="p", status=s)
            for i, s in enumerate(["ok", "oom"])]
    result = ConfirmResult(study_name="s", storage="sqlite:///x.db", fingerprint="f", budget_s=60, trials=rows)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = FakeTTY()
    emit(confirm_view(result), make_console(tty, width=100))
    assert "\x1b[32mok" in tty.getvalue() and "\x1b[31moom" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = FakeTTY()
    emit(confirm_view(result), make_console(plain, width=100))
    assert "\x1b[32m" not in plain.getvalue() and "\x1b[31m" not in plain.getvalue()


def test_time_and_cost_rankings_show_what_they_sort_by(capsys, monkeypatch):
    """--objective cost sorts by GPU-hours per token (x price): the table shows it, and the time to train a token
    budget; a throughput ranking keeps its columns."""
    monkeypatch.setenv("COLUMNS", "160")
    base = ["suggest", "--model", "1.5B", "--preset", NANO, "--top", "3"]

    def header(extra):
        assert main(base + extra) == 0
        return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("#  plan"))

    assert header(["--objective", "cost"]).split()[-1] == "GPU-h/Mtok"
    assert header(["--objective", "cost", "--token-budget", "1e10", "--price-per-gpu-hour", "2"]).split()[-3:] == \
        ["to", "train", "cost/Mtok"]
    assert header(["--objective", "time", "--token-budget", "1e10"]).split()[-2:] == ["to", "train"]
    assert header(["--token-budget", "1e10"]).split()[-1] == "net/step"
    # the column is the ranking's key: GPU-hours per million tokens rise down the cost table, x price when given
    assert main(base + ["--objective", "cost", "--price-per-gpu-hour", "2", "--token-budget", "1e10",
                        "--json"]) == 0
    top = json.loads(capsys.readouterr().out)["ranking"]["top"]
    per_mtok = [e["plan"]["dp"] * e["plan"]["tp"] * e["plan"]["pp"] / e["tokens_per_s"] * 1e6 / 3600 for e in top]
    assert per_mtok == sorted(per_mtok)
    assert top[0]["cost"] == pytest.approx(2 * per_mtok[0] * 1e4, rel=1e-6)  # 1e10 tokens = 1e4 Mtok
