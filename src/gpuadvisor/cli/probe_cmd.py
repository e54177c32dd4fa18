"""`gpuadvisor probe`: show what is on this host (GPUs, links, NICs, CPU/RAM), optionally measure and save it."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import UserError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `probe` subcommand to the top-level parser."""
    p = sub.add_parser(
        "probe",
        help="show this host's GPUs, links, NICs and CPU/RAM",
        description="Probe this host: NVML GPUs, `nvidia-smi topo -m`, NICs (sysfs), CPU and RAM. "
        "A host without GPUs is a normal result.",
    )
    p.add_argument("--json", action="store_true",
                   help="print the ProbeReport as JSON (with --measure: {probe, measure, health})")
    p.add_argument("--topo-file", metavar="FILE",
                   help="use a saved `nvidia-smi topo -m` capture instead of running nvidia-smi")
    p.add_argument("--save", metavar="FILE", help="write the cluster file built from this probe")
    p.add_argument("--cpu-ranks", type=int, metavar="N",
                   help="with --save on a GPU-less host: model N CPU ranks (gloo)")
    p.add_argument("--measure", action="store_true",
                   help="also run the measuring probes (collectives, GEMM, copies; needs torch)")
    p.add_argument("--quick", action="store_true", help="with --measure: fewer sizes and repeats")
    p.add_argument("--probes", metavar="LIST", default=None,
                   help="with --measure: comma list of collectives,matmul,hostcopy (default all); "
                        "with --cluster --measure, matmul is run on every node")
    p.add_argument("--cluster", metavar="HOSTS",
                   help="probe every node of a hosts/cluster file through its access (ssh, slurm, prefix) and merge")
    p.add_argument("--port", type=int, default=29530, help="with --cluster --measure: rendezvous port on node 0")
    p.add_argument("--sysfs-root", metavar="DIR", default="/", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def _optional(module: str, name: str, feature: str) -> Callable[..., Any]:
    """Import `name` from `module`, or raise a one-line UserError saying the feature is not installed."""
    import importlib

    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        if missing.split(".")[0] == "gpuadvisor":
            raise UserError(f"{feature} is not installed in this gpuadvisor build ({missing} is missing)") from None
        raise UserError(f"{feature} needs the Python module '{missing}', which is not installed; "
                        "install it and retry") from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise UserError(f"{feature} is not installed in this gpuadvisor build ({module}.{name} is missing)")
    return fn


def _health(report: Any, measured: Any) -> Optional[list[str]]:
    """Health findings when that module is installed, else None (the section is left out)."""
    try:
        from ..probe.health import findings
    except ModuleNotFoundError as exc:
        if exc.name and "gpuadvisor" in exc.name:
            return None
        raise
    return list(findings(report, measured))


def _read_topo(path: str) -> str:
    """The capture's text, validated by the parser; one-line UserError when unreadable or not a matrix."""
    from ..probe.topo import TopoParseError, parse_topo

    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"cannot read topology file {path}: {exc.strerror or exc}; "
                        "save it with `nvidia-smi topo -m > FILE`") from None
    try:
        parse_topo(text)
    except TopoParseError as exc:
        raise TopoParseError(f"{path}: {exc}") from None
    return text


def run(args: argparse.Namespace) -> int:
    """Handle `gpuadvisor probe`: probe, optionally measure, print (table or JSON), optionally save."""
    from ..probe.inventory import probe_host
    from ..probe.render import report_view
    from .console import emit

    if args.quick and not args.measure:
        raise UserError("--quick only applies with --measure; add --measure or drop --quick")
    if args.probes is not None and not args.measure:
        raise UserError("--probes only applies with --measure; add --measure or drop --probes")
    if args.cpu_ranks is not None and args.cpu_ranks < 1:
        raise UserError(f"--cpu-ranks must be at least 1, got {args.cpu_ranks}")
    if args.cpu_ranks is not None and not args.save:
        raise UserError("--cpu-ranks only applies with --save FILE; add --save or drop --cpu-ranks")
    if args.save:
        from .argtypes import check_writable

        check_writable(args.save, "--save")
    if args.cluster:
        return _run_cluster(args)
    topo_text = _read_topo(args.topo_file) if args.topo_file else None
    build = save = None
    if args.save:  # check the feature before spending time on probes
        build = _optional("gpuadvisor.hardware.build", "cluster_from_probe", "--save (cluster building)")
        save = _optional("gpuadvisor.hardware.cluster_file", "save_cluster", "--save (cluster files)")
    report = probe_host(sysfs_root=args.sysfs_root, topo_text=topo_text)
    measured = None
    if args.measure:
        run_measurements = _optional("gpuadvisor.probe.measure", "run_measurements", "--measure")
        kwargs = {"probes": _probe_list(args.probes)} if args.probes is not None else {}
        measured = _measure_with_progress(run_measurements, quick=args.quick, **kwargs)
    health = _health(report, measured)
    if args.json:
        if measured is None:
            print(report.model_dump_json(indent=2))
        else:
            doc = {"probe": report.model_dump(mode="json"), "measure": measured.model_dump(mode="json"),
                   "health": health}
            print(json.dumps(doc, indent=2))
    else:
        emit(report_view(report, measured=measured, health=health))
    if build is not None and save is not None:
        cluster = build(report, cpu_ranks=args.cpu_ranks, measured=measured)
        path = save(cluster, args.save)
        print(f"saved cluster to {path or args.save}", file=sys.stderr)
    return 0


def _measure_with_progress(run_measurements: Callable[..., Any], **kwargs: Any) -> Any:
    """Run the measuring probes showing which one runs, its ticking time and the budget left (stderr)."""
    from .progress import LiveProgress, fmt_duration

    with LiveProgress("gpuadvisor probe") as view:
        def step(name: str, i: int, n: int, left: float) -> None:
            view.step(f"measuring {name} ({i}/{n})",
                      lambda dt: f"{fmt_duration(dt)}  (budget left {fmt_duration(max(0.0, left - dt))})")

        return run_measurements(nproc=None, progress=step, **kwargs)


def _probe_list(text: str) -> list[str]:
    """`--probes a,b` -> ['a', 'b']; a one-line UserError for an unknown or empty name."""
    from ..probe.measure import PROBES

    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in PROBES]
    if bad or not names:
        raise UserError(f"--probes: unknown probe(s) {bad or [text]}; choose from {','.join(PROBES)}")
    return names


def _run_cluster(args: argparse.Namespace) -> int:
    """`probe --cluster HOSTS`: pre-flight, inventory of every node, optional inter-node measurement."""
    from ..hardware.cluster_file import load_cluster, save_cluster
    from ..remote.cluster_probe import internode_measurement, probe_cluster, with_network
    from ..remote.preflight import preflight, require_ok
    from .render import describe_cluster

    if args.topo_file or args.cpu_ranks is not None:
        raise UserError("--topo-file and --cpu-ranks describe this host; with --cluster put them in the hosts file")
    if args.probes is not None:
        raise UserError("--probes does not apply with --cluster: --measure runs matmul on every node and "
                        "collectives between the nodes; drop --probes")
    from .progress import LiveProgress, fmt_duration

    hosts = load_cluster(args.cluster)
    n = len(hosts.nodes)
    warnings: list[str] = []
    with LiveProgress("gpuadvisor probe") as view:  # each step shows its ticking time on stderr
        view.step(f"pre-flight checks on {n} node(s)", fmt_duration)
        require_ok(preflight(hosts, port=args.port if args.measure and n > 1 else None))
        view.step(f"probing {n} node(s)" + (" and measuring GEMM on each" if args.measure else ""), fmt_duration)
        cluster = probe_cluster(hosts, measure_compute=args.measure, quick=args.quick)
        if args.measure and len(cluster.nodes) > 1:
            view.step(f"measuring collectives between {len(cluster.nodes)} nodes", fmt_duration)
            m = internode_measurement(cluster, port=args.port, quick=args.quick)
            cluster, warnings = with_network(cluster, m), list(m.warnings)
    if args.json:
        print(cluster.model_dump_json(indent=2))
    else:
        print(describe_cluster(cluster))
        for node in cluster.nodes:
            devs = ", ".join(sorted({d.name for d in node.devices})) or "no devices"
            print(f"  {node.name}: {len(node.devices)} x {devs}; {len(node.nics)} NIC(s); access {node.access.method}")
        for line in [*cluster.notes, *warnings]:
            print(f"  - {line}")
    if args.save:
        print(f"saved cluster to {save_cluster(cluster, args.save)}", file=sys.stderr)
    return 0
