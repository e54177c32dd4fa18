"""The trainer's main: run a TrainerJob on this rank, gather metrics, write one RunMetrics file.

Loop (Appendix E): warm-up steps, then a barrier and the timed window of `steps` optimizer
steps, each bracketed by device synchronisation. Rank 0 gathers every rank's TrainingResults
with all_gather_object and writes DIR/metrics.json atomically (temp file, fsync, rename).
A failing rank writes DIR/error-rank<r>.json classifying the cause (oom, timeout, exception)
and exits non-zero; the process group is destroyed in `finally`.

Exit codes: 0 ok, 1 exception, 3 out of memory, 4 collective timeout.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import traceback
from pathlib import Path
from typing import Optional

from ..schemas.job import TrainerJob
from ..trials.atomic import write_atomic
from ..schemas.trial import RunMetrics, TrainingResults

EXIT_CODES = {"exception": 1, "oom": 3, "timeout": 4}
_TIMEOUT_RE = re.compile(r"timed? ?out|timeout|deadline exceeded", re.IGNORECASE)


def classify(exc: BaseException) -> str:
    """'oom' (CUDA or host out of memory), 'timeout' (collective/rendezvous timeout) or 'exception'."""
    try:
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return "oom"
    except ImportError:
        pass
    if isinstance(exc, MemoryError):
        return "oom"
    if isinstance(exc, TimeoutError) or _TIMEOUT_RE.search(f"{type(exc).__name__}: {exc}"):
        return "timeout"
    return "exception"


def write_error(out: Path, rank: int, exc: BaseException) -> str:
    """DIR/error-rank<r>.json: {rank, cause, type, message, traceback, hostname, pid}; returns the kind."""
    kind = classify(exc)
    record = {
        "rank": rank, "cause": kind, "type": type(exc).__name__, "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "hostname": socket.gethostname(), "pid": os.getpid(),
    }
    write_atomic(out / f"error-rank{rank}.json", json.dumps(record, indent=2))
    return kind


def _versions() -> dict[str, str]:
    import torch

    v = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        from importlib.metadata import version

        v["gpuadvisor"] = version("gpuadvisor")
        v["deepspeed"] = version("deepspeed")
    except Exception:
        pass
    return v


def train(job: TrainerJob, out: Path) -> Optional[RunMetrics]:
    """Run `job` on this rank; rank 0 returns (and writes) the RunMetrics, other ranks return None."""
    import torch.distributed as dist

    from .aggregate import summarize
    from .metrics import Recorder
    from .parallel import setup
    from .strategies import build_strategy

    ctx = setup(job)
    strategy = build_strategy(ctx)
    rec = Recorder(ctx)
    losses: list[float] = []
    for step in range(job.warmup):
        loss = strategy.step(step)
        if loss is not None:
            losses.append(loss)
    from .report import progress_line, summary_lines

    tokens_per_step = strategy.global_batch * strategy.seq_len
    rec.start_window()
    for i, step in enumerate(range(job.warmup, job.warmup + job.steps), start=1):
        t0 = rec.step_start()
        loss = strategy.step(step)
        rec.step_end(t0)
        if loss is not None:
            losses.append(loss)
        if ctx.rank == 0 and job.log_every and (i % job.log_every == 0 or i == job.steps):
            print(progress_line(i, job.steps, loss, rec.step_times[-1], tokens_per_step), flush=True)
    rec.end_window()
    mine = rec.results(job.steps, strategy.tokens_counted_per_step(), strategy.tokens_seen_per_step(), losses)
    gathered: list = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine.model_dump())
    if ctx.rank != 0:
        return None
    ranks = [TrainingResults.model_validate(r) for r in gathered]
    w = job.workload
    metrics = RunMetrics(
        plan=job.plan, model_name=w.model.name if job.trainer_model == "gpt" else "resnet18",
        seq_len=strategy.seq_len, global_batch=strategy.global_batch, precision=ctx.precision,
        steps=job.steps, warmup=job.warmup, backend=ctx.backend, ranks=ranks,
        summary=summarize(ranks, job.plan), versions=_versions(), hostname=socket.gethostname(),
        strategy=strategy.name,
    )
    write_atomic(out / "metrics.json", metrics.model_dump_json(indent=2))
    print("\n".join(summary_lines(metrics, job)), flush=True)
    return metrics


def run_jobs(pairs: list[tuple[TrainerJob, Path]]) -> int:
    """Run several jobs of the same world size in one launch, sharing the process group.

    Pays torchrun/import start-up once (tests, CPU benchmark). Stops at the first failure, which is
    recorded like `main` does; returns the exit code.
    """
    import gc

    from .parallel import teardown

    rank = int(os.environ.get("RANK", "0"))
    clean = False
    try:
        for job, out in pairs:
            try:
                train(job, out)
            except BaseException as exc:  # noqa: BLE001
                kind = write_error(out, rank, exc)
                print(f"[rank {rank}] {kind}: {type(exc).__name__}: {exc}", flush=True)
                traceback.print_exc()
                return EXIT_CODES[kind]
            gc.collect()
        clean = True
        return 0
    finally:
        teardown(clean)


def load_job(path: str, steps: Optional[int] = None, warmup: Optional[int] = None,
             ds_config: Optional[str] = None) -> TrainerJob:
    """Read a TrainerJob JSON, applying --steps/--warmup/--ds-config overrides; ValueError with the reason if invalid."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read trainer job '{path}': {exc}") from None
    if ds_config is not None:
        try:
            data["deepspeed_config"] = json.loads(Path(ds_config).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read DeepSpeed config '{ds_config}': {exc}") from None
    if steps is not None:
        data["steps"] = steps
    if warmup is not None:
        data["warmup"] = warmup
    try:
        return TrainerJob.model_validate(data)
    except ValueError as exc:  # pydantic ValidationError; one line: the first field at fault and why
        from ..errors import validation_message

        why = validation_message(exc, with_field=True)
        raise ValueError(f"invalid trainer job '{path}': {why}; write it again with gpuadvisor "
                         "suggest --emit (or make_job)") from None


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuadvisor.trainers",
                                 description="Run a bundled trainer for a TrainerJob (under torchrun for > 1 rank).")
    ap.add_argument("--plan", required=True, help="TrainerJob JSON file (plan + workload + run length)")
    ap.add_argument("--steps", type=int, help="timed optimizer steps (overrides the job)")
    ap.add_argument("--warmup", type=int, help="untimed warm-up steps (overrides the job)")
    ap.add_argument("--out", required=True, help="output folder for metrics.json / error-rank<r>.json")
    ap.add_argument("--ds-config", help="DeepSpeed JSON for ZeRO plans (default: built from the plan)")
    ap.add_argument("--also", nargs=2, action="append", default=[], metavar=("JOB", "DIR"),
                    help="run another job (same world size) in this launch afterwards, writing to DIR")
    args = ap.parse_args(argv)
    out = Path(args.out)
    rank = int(os.environ.get("RANK", "0"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.also:
        try:
            pairs = [(load_job(args.plan, args.steps, args.warmup, args.ds_config), out)]
            pairs += [(load_job(j, args.steps, args.warmup), Path(d)) for j, d in args.also]
        except ValueError as exc:
            write_error(out, rank, exc)
            print(f"[rank {rank}] exception: {exc}", flush=True)
            return EXIT_CODES["exception"]
        return run_jobs(pairs)
    try:  # a bad job file is the caller's input: one line, recorded, no traceback (as for --also above)
        job = load_job(args.plan, args.steps, args.warmup, args.ds_config)
    except ValueError as exc:
        write_error(out, rank, exc)
        print(f"[rank {rank}] exception: {exc}", flush=True)
        return EXIT_CODES["exception"]
    clean = False
    try:
        train(job, out)
        clean = True
        return 0
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded for the trial runner
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            raise
        kind = write_error(out, rank, exc)
        print(f"[rank {rank}] {kind}: {type(exc).__name__}: {exc}", flush=True)
        traceback.print_exc()
        return EXIT_CODES[kind]
    finally:
        from .parallel import teardown

        teardown(clean)
