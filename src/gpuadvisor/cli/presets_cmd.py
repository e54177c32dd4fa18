"""`gpuadvisor presets`: the bundled machine presets as a table (or JSON), each with its source."""
from __future__ import annotations

import argparse
import json
from collections import Counter

from ..schemas.hardware import Cluster, LinkClass


def _gpu(cluster: Cluster) -> str:
    names = Counter(d.name for n in cluster.nodes for d in n.devices)
    return ", ".join(names)


def _links(cluster: Cluster) -> str:
    """Distinct in-node link classes with their bandwidth, e.g. 'PXB 23.6, PIX 25.2 GB/s'."""
    seen: dict[str, float] = {}
    for node in cluster.nodes:
        for link in node.links:
            label = f"NV{link.nvlink_count}" if link.link_class == LinkClass.NVLINK else link.link_class.value
            seen.setdefault(label, link.bandwidth_gb_per_s)
    return ", ".join(f"{k} {v:.3g}" for k, v in seen.items()) + (" GB/s" if seen else "-")


def _network(cluster: Cluster) -> str:
    net = cluster.network
    if net is None:
        return "-"
    speed = f"{net.link_speed_gbit_per_s:g}G " if net.link_speed_gbit_per_s else ""
    return f"{speed}{net.protocol} {net.bandwidth_gb_per_s:g} GB/s"


def preset_rows() -> list[dict]:
    """One summary dict per bundled preset."""
    from ..hardware.presets import list_presets, load_preset, preset_citation

    rows = []
    for name in list_presets():
        c = load_preset(name)
        per_node = sorted(set(c.devices_per_node))
        shape = f"{len(c.nodes)}x{per_node[0]}" if len(per_node) == 1 else f"{len(c.nodes)} nodes, {c.num_devices} dev"
        rows.append({
            "name": name, "nodes": len(c.nodes), "devices_per_node": c.devices_per_node, "shape": shape,
            "gpu": _gpu(c), "links": _links(c), "network": _network(c), "source": preset_citation(name),
        })
    return rows


def _table(rows: list[dict], width: int = 60) -> str:
    cols = [("name", "NAME"), ("shape", "NODESxDEV"), ("gpu", "DEVICE"), ("links", "LINKS"),
            ("network", "NETWORK"), ("source", "SOURCE")]
    cells = [[h for _, h in cols]] + [
        [r[k] if k != "source" or len(r[k]) <= width else r[k][: width - 3] + "..." for k, _ in cols] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cols))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def run(args: argparse.Namespace) -> int:
    rows = preset_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(_table(rows, width=10**6 if args.full else 60))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("presets", help="list the bundled cluster presets",
                       description="The bundled machine presets (use one with --preset NAME), with sources.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--full", action="store_true", help="do not shorten the source column")
    p.set_defaults(func=run)
