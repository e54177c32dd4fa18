"""Run one trial across several nodes: per-node torchrun (c10d rendezvous) under a watchdog on each node.

The per-node torchrun argument lists and environment come from `launch.build_launch` (the same
commands a user gets), with three changes: torchrun is `python -m torch.distributed.run` of the
node's Python, node 0 is told to host the c10d store (`--rdzv-conf is_host=true`, with
`--local-addr`), and the trainer reads this trial's job file and writes into its folder. Each node's
launcher runs under `gpuadvisor.trials.guard` (deadline, subreaper, stops when the advisor's pipe
closes), started through the node's access (`remote.access`). When any node fails, every node is
stopped: the guards get EOF, the local sessions are killed, and the node-side reaper kills whatever
still carries the trial's token on each node. The outcome is classified by the single-host
runner's `classify` and the error names the node.

Output folders are shared by the nodes (local and prefix nodes share the filesystem; for ssh/slurm
nodes the job file is copied to the same path and the result files are fetched back).
"""
from __future__ import annotations

import json
import shlex
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping, Optional, Union

from ..errors import UserError
from ..launch.build import TRAINER_MODULE, build_launch
from ..remote.access import describe, node_python, run_on_node
from ..remote.group import Cancelled, NodeProc, finish_group, node_token, start_group, stop_group, wait_group
from ..remote.preflight import preflight, require_ok
from ..schemas import Estimate, TrainerJob, TrialRecord
from ..schemas.hardware import Cluster, Node
from .atomic import write_atomic
from .classify import classify, validate_metrics
from .runner import TrialCancelled, run_trial

RECORD = "record.json"
GUARD = Path(__file__).resolve().parent / "guard.py"
_FETCH = ("import glob,json,os,sys\nd=sys.argv[1]\nout={}\nfor p in"
          "  glob.glob(os.path.join(d,'error-rank*.json'))+[os.path.join(d,'metrics.json')]:\n"
          "    try: out[os.path.basename(p)]=open(p).read()\n    except OSError: pass\nprint(json.dumps(out))")
_PUT = "import os,sys\np=sys.argv[1]\nos.makedirs(os.path.dirname(p),exist_ok=True)\nopen(p,'w').write(sys.stdin.read())"

__all__ = ["run_trial_multinode", "run_trial_on_cluster", "multinode_commands", "RECORD"]


def _remote_fs(node: Node) -> bool:
    """ssh/slurm nodes may not share this filesystem: files are copied there and back."""
    return node.access.method in ("ssh", "slurm")


def multinode_commands(job: TrainerJob, cluster: Cluster, out_dir: Path, *, port: int, token: str,
                       timeout_s: float, grace_s: float = 5.0, trainer_module: str = TRAINER_MODULE,
                       env: Optional[Mapping[str, str]] = None) -> list[tuple[Node, list[str], dict[str, str]]]:
    """(node, argv, env) per node of the plan: the guard around build_launch's torchrun command.

    `env` adds or overrides variables on every node (e.g. OMP_NUM_THREADS=1 on an oversubscribed host).
    """
    plan = job.plan
    launch = build_launch(plan, cluster, job.workload, port=port, steps=job.steps, out_dir=str(out_dir))
    by_name = {n.name: n for n in cluster.nodes}
    common = {e.name: e.value for e in launch.env}
    job_file = out_dir / "job.json"
    trainer = ["-m", trainer_module] if not trainer_module.endswith(".py") else [trainer_module]
    out = []
    for nl in launch.nodes:
        node = by_name[nl.node]
        argv = list(nl.argv)
        cut = argv.index("-m") if "-m" in argv else len(argv)  # torchrun ... -m gpuadvisor.trainers <args>
        launcher = [node_python(node), "-m", "torch.distributed.run", *argv[1:cut]]
        if "--rdzv-id" in launcher:  # a fresh rendezvous per trial
            k = launcher.index("--rdzv-id") + 1
            launcher[k] = f"{launcher[k]}-{token[:8]}"
        trainer_args = ["--plan", str(job_file), "--steps", str(job.steps), "--warmup", str(job.warmup),
                        "--out", str(out_dir)]
        guard = [node_python(node), str(GUARD), "--token", node_token(token, node), "--timeout", f"{timeout_s:.3f}",
                 "--grace", str(grace_s), "--status", str(out_dir / f"guard-{node.name}.json"), "--"]
        node_env = {**common, **{e.name: e.value for e in nl.env}, "PYTHONUNBUFFERED": "1", **(env or {})}
        out.append((node, [*guard, *launcher, *trainer, *trainer_args], node_env))
    return out


def _put_job(nodes: list[Node], job_file: Path, text: str) -> None:
    """Write the job file locally and copy it to the same path on ssh/slurm nodes."""
    write_atomic(job_file, text)
    for node in nodes:
        if _remote_fs(node):
            done = run_on_node(node, [node_python(node), "-c", _PUT, str(job_file)], 60, input=text)
            if done.returncode != 0:
                raise UserError(f"node {describe(node)}: cannot write {job_file} there "
                                f"({(done.stderr or '').strip()[-200:]}); make the folder writable")


def _fetch_results(nodes: list[Node], out: Path) -> None:
    """Copy metrics.json / error-rank*.json from ssh/slurm nodes when they are not here yet."""
    for node in nodes:
        if not _remote_fs(node):
            continue
        try:
            done = run_on_node(node, [node_python(node), "-c", _FETCH, str(out)], 60)
            files = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {}
        except (UserError, ValueError, IndexError):
            continue
        for name, text in files.items():
            if not (out / name).exists():
                write_atomic(out / name, text)


def _prepare(job: TrainerJob, nodes: list[Node], timeout_s: float) -> None:
    """Build DeepSpeed's JIT op once per node before ranks start (two ranks building it at once abort)."""
    if not job.plan.zero_stage:
        return
    code = "from gpuadvisor.trainers import ensure_deepspeed_ops; ensure_deepspeed_ops()"
    for node in nodes:
        try:
            run_on_node(node, [node_python(node), "-c", code], timeout_s)
        except UserError:
            pass


def _root_cause(procs: list[NodeProc], failed: NodeProc) -> NodeProc:
    """Among nodes that failed in the same poll, prefer one killed by a signal (a node that died)."""
    same = [p for p in procs if p.returncode not in (None, 0) and p.ended_at == failed.ended_at]
    killed = [p for p in same if (p.returncode or 0) < 0]
    return killed[0] if killed else failed


def run_trial_multinode(job: TrainerJob, cluster: Cluster, out_dir: Union[str, Path], *, timeout_s: float,
                        port: int = 29540, trial_id: Optional[str] = None, study: str = "", grace_s: float = 5.0,
                        estimate: Optional[Estimate] = None, env: Optional[Mapping[str, str]] = None,
                        check: bool = True, trainer_module: str = TRAINER_MODULE,
                        cancel: Optional[threading.Event] = None) -> TrialRecord:
    """Run `job` across the nodes its plan uses and return its classified TrialRecord (also out_dir/record.json).

    Args:
        job: the trainer job (plan.nodes x plan.devices_per_node ranks).
        cluster: nodes with `access` (address and ifname for the rendezvous and sockets).
        out_dir: the trial folder (job.json, per-node logs `trial-<node>.std{out,err}.log`, metrics.json).
        timeout_s: wall-clock deadline for the whole trial; past it every node is stopped (status timeout).
        port: the c10d rendezvous port on node 0.
        env: extra variables for every node (override the launch config's).
        check: run pre-flight first (reachability, versions, port free, interfaces); raises UserError.
        cancel: when set from another thread, every node is stopped and TrialCancelled is raised.

    A node failing stops all nodes; afterwards no process of the trial is left on any node (the
    record's error lists survivors if some could not be stopped). Status as the single-host runner:
    ok, oom, timeout, crash, rendezvous, invalid_metrics; errors name the node (`node n1 (...)`).
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    trial_id = trial_id or out.name
    token = uuid.uuid4().hex
    start = time.monotonic()
    for stale in [*out.glob("error-rank*.json"), *out.glob("guard-*.json"), out / "metrics.json", out / RECORD]:
        stale.unlink(missing_ok=True)
    commands = multinode_commands(job, cluster, out, port=port, token=token, timeout_s=timeout_s, grace_s=grace_s,
                                  trainer_module=trainer_module, env=env)
    nodes = [n for n, _, _ in commands]
    if check:
        require_ok(preflight(cluster.model_copy(update={"nodes": nodes}), port=port))
    _put_job(nodes, out / "job.json", job.model_dump_json(indent=1))
    _prepare(job, nodes, timeout_s)
    (out / "commands.txt").write_text("".join(f"# {describe(n)}\n{shlex.join(a)}\n" for n, a, _ in commands))
    remaining = max(1.0, timeout_s - (time.monotonic() - start))
    procs = start_group(commands, out, token, label="trial")
    try:
        failed, timed_out = wait_group(procs, time.monotonic() + remaining + grace_s + 5, cancel=cancel)
    except Cancelled:
        stop_group(procs, token, grace_s)
        raise TrialCancelled("trial cancelled") from None
    except BaseException:  # Ctrl-C, SystemExit from a signal handler: leave nothing running on any node
        stop_group(procs, token, grace_s)
        raise
    left = stop_group(procs, token, grace_s) if (failed or timed_out) else finish_group(procs, token)
    _fetch_results(nodes, out)
    if failed is not None:
        failed = _root_cause(procs, failed)
    record = _record(job, out, procs, failed, timed_out, left, trial_id, study, estimate, start)
    write_atomic(out / RECORD, record.model_dump_json(indent=1))
    return record


def _record(job: TrainerJob, out: Path, procs: list[NodeProc], failed: Optional[NodeProc], timed_out: bool,
            left: dict[str, list[int]], trial_id: str, study: str, estimate: Optional[Estimate],
            start: float) -> TrialRecord:
    """Classify the trial from the first failing node (or the deadline) and build the record."""
    order = [p for p in procs if p is not failed] + ([failed] if failed else [])
    tail = "\n".join(p.stderr_tail(8000) for p in order)
    died = failed is not None and (failed.returncode or 0) < 0
    if timed_out or (failed is not None and failed.returncode == 124):
        reason, code = "timeout", None
    elif died:
        reason, code = "node-died", failed.returncode  # type: ignore[union-attr]
    else:
        reason, code = "exited", (failed.returncode if failed else 0)
    outcome = classify(out, job, code, reason, tail)
    late = None
    if reason == "exited" and failed is not None and outcome.status == "crash" and not list(out.glob("error-rank*")):
        metrics, _ = validate_metrics(out / "metrics.json", job)
        if metrics is not None:  # every rank finished and rank 0 wrote valid metrics: a teardown abort
            late = (f"note: node {describe(failed.node)} exited {failed.returncode} after the metrics were written "
                    "(a rank aborted while tearing down the process group); the measurement stands")
            outcome = outcome._replace(status="ok", error=None, metrics=metrics)
    error = outcome.error
    if died and failed is not None:
        error = (f"node {describe(failed.node)}: its processes were killed (signal {-(failed.returncode or 0)}) "
                 "mid-trial: the node died or was stopped; every node was stopped")
        status = "crash"
    else:
        status = outcome.status
        if failed is not None and error:
            error = f"node {describe(failed.node)}: {error}"
        elif timed_out and error:
            error = f"all nodes: {error}"
    if late:
        error = late
    if left:
        error = f"{error or ''} (processes left: {left})".strip()
    metrics = outcome.metrics if status == "ok" else None
    return TrialRecord(
        trial_id=trial_id, study=study, plan=job.plan, status=status,  # type: ignore[arg-type]
        predicted_tokens_per_s=estimate.tokens_per_s if estimate else None,
        predicted_peak_memory_bytes=estimate.memory.total if estimate else None,
        measured_tokens_per_s=metrics.summary.throughput_tokens_per_s if metrics else None,
        measured_peak_memory_bytes=metrics.summary.peak_memory_bytes if metrics else None,
        error=error, error_file=outcome.error_file, duration_s=round(time.monotonic() - start, 3), metrics=metrics)


def run_trial_on_cluster(job: TrainerJob, cluster: Cluster, out_dir: Union[str, Path], *, timeout_s: float,
                         port: int = 29540, **kwargs) -> TrialRecord:
    """The study's dispatcher: plans on one local node go to the single-host `runner.run_trial`; plans that
    use several nodes, or a node reached through ssh/slurm/prefix, go to `run_trial_multinode`.

    kwargs: trial_id, study, grace_s, estimate, env, trainer_module, cancel (both runners), launcher (single-host).
    """
    if job.plan.nodes == 1 and cluster.nodes[0].access.method == "local":
        return run_trial(job, out_dir, timeout_s=timeout_s, nproc=job.plan.devices_per_node, **kwargs)
    kwargs.pop("launcher", None)
    return run_trial_multinode(job, cluster, out_dir, timeout_s=timeout_s, port=port, **kwargs)
