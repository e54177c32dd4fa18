"""`gpuadvisor presets`: the bundled machine presets as a table (or JSON), each with its source."""
from __future__ import annotations

import argparse
import json
from collections import Counter

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.padding import Padding

from ..schemas.hardware import Cluster, LinkClass


def _gpu(cluster: Cluster) -> str:
    from .console import gpu_label

    names = Counter(gpu_label(d.name) for n in cluster.nodes for d in n.devices)
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


SHORT = 40  # source column length without --full


def presets_view(rows: list[dict], full: bool = False) -> RenderableType:
    """The presets as a table where the console is wide enough for its cells unwrapped, else one block per preset
    (name, shape and device, then links, network and source indented); without `full` the source is cut to SHORT
    characters."""
    return _PresetsView(rows, full)


class _PresetsView:
    def __init__(self, rows: list[dict], full: bool):
        self.rows, self.full = rows, full

    def _source(self, r: dict) -> str:
        return r["source"] if self.full or len(r["source"]) <= SHORT else r["source"][:SHORT - 3] + "..."

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from .console import Column, Text, make_table

        table = make_table(Column("NAME", no_wrap=True), Column("NODESxDEV", no_wrap=True),
                           Column("DEVICE", overflow="fold"), Column("LINKS", overflow="fold"),
                           Column("NETWORK", overflow="fold"), Column("SOURCE", overflow="fold"))
        for r in self.rows:
            table.add_row(r["name"], r["shape"], r["gpu"], r["links"], r["network"], self._source(r))
        if console.measure(table, options=options.update_width(10_000)).maximum <= options.max_width:
            yield table
            return
        for r in self.rows:  # too narrow for unwrapped cells: a block per preset
            yield Text(f"{r['name']}  {r['shape']} {r['gpu']}", style="bold")
            yield Padding(Text(f"links {r['links']}; network {r['network']}"), (0, 0, 0, 2))
            yield Padding(Text(f"source: {self._source(r)}"), (0, 0, 0, 2))


def run(args: argparse.Namespace) -> int:
    rows = preset_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        from .console import emit

        emit(presets_view(rows, full=args.full))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("presets", help="list the bundled cluster presets",
                       description="The bundled machine presets (use one with --preset NAME), with sources.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--full", action="store_true", help="show the whole source column (wrapped)")
    p.set_defaults(func=run)
