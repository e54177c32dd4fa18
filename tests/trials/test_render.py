"""The confirm table shows predicted vs measured and keeps plans that differ in one knob apart."""
from gpuadvisor.schemas import parse_plan
from gpuadvisor.trials.render import render_confirm
from gpuadvisor.trials.schemas import ConfirmResult, TrialRow


def _row(n, plan, status, pred, meas, seed_rank=None, error=None):
    return TrialRow(number=n, trial_id=f"t{n}", plan=plan, plan_str=plan.to_string(), status=status,
                    seed_rank=seed_rank, predicted_tokens_per_s=pred, measured_tokens_per_s=meas,
                    measured_over_predicted=(meas / pred) if meas else None, error=error)


def test_render_confirm_table_and_verdict():
    a = parse_plan("dp=2,mb=4,bucket_mb=25")
    b = parse_plan("dp=2,mb=4,bucket_mb=100")
    c = parse_plan("dp=2,mb=8,m=1,zero=1")
    r = ConfirmResult(study_name="s", storage="sqlite:///x.db", fingerprint="f", budget_s=180, elapsed_s=90,
                      trials=[_row(0, a, "ok", 1000.0, 900.0, 0), _row(1, b, "ok", 990.0, 1200.0),
                              _row(2, c, "oom", 1100.0, None, 1, error="CUDA out of memory")],
                      winner=b, winner_measured_tokens_per_s=1200.0, first_pick=a,
                      first_pick_measured_tokens_per_s=900.0, first_pick_gap_pct=25.0)
    text = render_confirm(r, width=120)
    lines = text.splitlines()
    row_a = next(line for line in lines if line.lstrip().startswith("0 "))
    row_b = next(line for line in lines if line.lstrip().startswith("1 "))
    assert "bucket_mb=25" not in row_a and "bucket_mb=100" in row_b  # the differing knob is visible
    assert "[top1]" in row_a and "0.90" in row_a and "1.20" in row_b
    assert "error: CUDA out of memory" in text
    assert "Confirmed winner: dp=2,mb=4,gpn=2,bucket_mb=100.0" in text
    assert "25.0% below the best" in text
    assert "optuna-dashboard sqlite:///x.db" in text
    for width in (80, 120):  # a long plan wraps inside its cell: no line is wider than the terminal
        long = parse_plan("dp=2,mb=4,recompute=1,zero=2,zero_reduce_bucket_size=500000000,"
                          "zero_allgather_bucket_size=500000000")
        wide = r.model_copy(update={"trials": [*r.trials, _row(3, long, "ok", 1.0, 1.0)]})
        out = render_confirm(wide, width=width)
        assert max(map(len, out.splitlines())) <= width and "recompute=true" in out


def test_confirm_progress_ticks_during_a_trial_and_is_plain_when_piped():
    import io
    import time

    from gpuadvisor.cli.console import make_console
    from gpuadvisor.cli.progress import LiveProgress
    from gpuadvisor.trials.progress import Progress

    trial = {"event": "trial", "n": 1, "plan": "dp=2,mb=4", "seed_rank": 0, "top_k": 3, "elapsed_s": 60,
             "budget_s": 900, "best_tokens_per_s": None}
    result = {"event": "result", "n": 1, "plan": "dp=2,mb=4", "status": "ok", "measured": 900.0, "predicted": 1000.0,
              "best_tokens_per_s": 900.0}
    live = io.StringIO()
    p = Progress(LiveProgress("gpuadvisor confirm", console=make_console(live, force_terminal=True, width=120)))
    p(trial)
    deadline = time.monotonic() + 10
    while "trial 1s  budget 1m01s/15m00s" not in live.getvalue() and time.monotonic() < deadline:
        time.sleep(0.1)
    p(result)
    p({"event": "done", "message": "winner dp=2,mb=4"})
    text = live.getvalue()
    assert "trial 1 (cost-model pick 1 of 3): dp=2,mb=4" in text and "trial 1s  budget 1m01s/15m00s" in text
    assert "trial 1 ok: dp=2,mb=4  measured 900 tok/s" in text and "winner dp=2,mb=4" in text
    plain = io.StringIO()
    q = Progress(LiveProgress("gpuadvisor confirm", console=make_console(plain, width=120)))
    for ev in (trial, result):
        q(ev)
    assert "\x1b" not in plain.getvalue() and plain.getvalue().splitlines() == [
        "gpuadvisor confirm: trial 1 (cost-model pick 1 of 3): dp=2,mb=4  trial 0s  budget 1m00s/15m00s  best -",
        "gpuadvisor confirm: trial 1 ok: dp=2,mb=4  measured 900 tok/s predicted 1,000 tok/s  best 900 tok/s"]
