"""Step 1, Hardware: probe this host, pick a bundled preset or load a cluster file; edit and save it."""
from __future__ import annotations

from typing import Any, Iterable, Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.containers import Horizontal, VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from ...cli.render import describe_cluster, human_bytes
from ...schemas import Cluster, Node
from ..widgets import Field, LINK_COLOURS
from ..wording import error_line, tui_wording
from .base import StepScreen


def preset_options() -> list[tuple[str, str]]:
    """(label, name) of every bundled cluster preset; empty if the preset catalog is not installed."""
    try:
        from ...hardware.presets import list_presets

        items = list_presets()
    except Exception:  # catalog missing or unreadable: the screen still offers probe and files
        return []
    out = []
    for item in items:
        name = item if isinstance(item, str) else getattr(item, "name", None) or str(item)
        out.append((name, name))
    return out


def health_findings(cluster: Cluster, report: Any) -> list[str]:
    """Health findings (degraded PCIe, no P2P, sentinel NIC speeds...) as display lines."""
    if report is None:
        return []
    try:
        from ...probe.health import findings
    except ImportError:
        return []
    try:
        found = findings(report, cluster=cluster)
    except Exception as exc:  # a probe oddity must not take the screen down
        return [f"[warn] health check failed: {exc}"]
    lines = []
    for f in found:
        sev = getattr(f, "severity", None)
        msg = getattr(f, "message", None) or str(f)
        lines.append(f"[{sev}] {msg}" if sev else msg)
    return lines


#: Nodes with more devices show a link summary and grouped devices instead of a matrix and one row per device
#: (a 128x128 matrix neither fits a terminal nor renders quickly).
MATRIX_MAX_DEVICES = 16


def _links_by_pair(node: Node) -> dict[tuple[int, int], Any]:
    """The node's links by (low, high) device index, built once (Node.link scans the whole list per call)."""
    return {(min(k.a, k.b), max(k.a, k.b)): k for k in node.links}


def link_summary(node: Node) -> Text:
    """Link classes of a large node as counts of device pairs, e.g. `NV12: 28 pairs, SYS: 96 pairs`."""
    counts: dict[str, int] = {}
    for link in _links_by_pair(node).values():
        cls = link.link_class.value
        token = f"NV{link.nvlink_count}" if cls == "NV" and link.nvlink_count else cls
        counts[token] = counts.get(token, 0) + 1
    n = len(node.devices)
    missing = n * (n - 1) // 2 - sum(counts.values())
    out = Text("links: ", style="dim")
    parts = [(f"{token}: {c} pairs", LINK_COLOURS.get(token.rstrip("0123456789") or token, "")) for token, c in
             sorted(counts.items(), key=lambda kv: -kv[1])]
    if missing > 0:
        parts.append((f"unknown: {missing} pairs", LINK_COLOURS["unknown"]))
    for i, (label, style) in enumerate(parts):
        out.append(("" if i == 0 else ", ") + label, style=style)
    return out


def link_matrix(node: Node) -> Table:
    """The node's device-to-device link classes as a matrix, coloured from fast (green) to slow (red)."""
    t = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False, title_justify="left")
    idx = [d.index for d in node.devices]
    links = _links_by_pair(node)
    t.add_column("", style="bold")
    for i in idx:
        t.add_column(f"G{i}", justify="center")
    for a in idx:
        row = []
        for b in idx:
            if a == b:
                row.append(Text("X", style=LINK_COLOURS["X"]))
                continue
            link = links.get((min(a, b), max(a, b)))
            if link is None:
                row.append(Text("?", style=LINK_COLOURS["unknown"]))
                continue
            cls = link.link_class.value
            token = f"NV{link.nvlink_count}" if cls == "NV" and link.nvlink_count else cls
            row.append(Text(token, style=LINK_COLOURS.get(cls, "")))
        t.add_row(f"G{a}", *row)
    return t


def device_table(node: Node) -> Table:
    """One row per device; on a large node, one row per kind of device with its index range and count."""
    gpus = Table(box=None, padding=(0, 1), show_edge=False)
    for col in ("#", "device", "memory", "PCIe", "bf16 TF"):
        gpus.add_column(col)
    rows: list[tuple[list[int], tuple[str, str, str, str]]] = []
    for d in node.devices:
        pcie = f"Gen{d.pcie_gen} x{d.pcie_width}" if d.pcie_gen and d.pcie_width else "-"
        cells = (d.name, human_bytes(d.memory_bytes), pcie, f"{d.peak_tflops_bf16:g}")
        if len(node.devices) > MATRIX_MAX_DEVICES and rows and rows[-1][1] == cells:
            rows[-1][0].append(d.index)
        else:
            rows.append(([d.index], cells))
    for idx, cells in rows:
        label = str(idx[0]) if len(idx) == 1 else f"{idx[0]}-{idx[-1]} ({len(idx)}x)"
        gpus.add_row(label, *cells)
    return gpus


def render_cluster(cluster: Cluster, notes: Iterable[str], findings: Iterable[str]) -> Group:
    """Everything about the cluster: summary, per node GPUs + link matrix + NICs, findings, notes."""
    parts: list[Any] = [Text(describe_cluster(cluster), style="bold")]
    if cluster.network and len(cluster.nodes) > 1:
        n = cluster.network
        parts.append(Text(f"network latency {n.latency_us:g} µs, rates from {n.rate_source}"
                          + (f", NIC {n.nic}" if n.nic else ""), style="dim"))
    for node in cluster.nodes:
        parts.append(Text(f"\n▸ {node.name}: {len(node.devices)} device(s), "
                          f"{node.cpu.cores} cores, {human_bytes(node.cpu.ram_bytes)} RAM", style="bold cyan"))
        parts.append(device_table(node))
        if len(node.devices) > MATRIX_MAX_DEVICES:
            parts.append(link_summary(node))
        elif len(node.devices) > 1:
            parts.append(Text("links:", style="dim"))
            parts.append(link_matrix(node))
        nics = ", ".join(f"{n.name} {n.kind} {f'{n.speed_gbit_per_s:g} Gb/s' if n.speed_gbit_per_s else 'speed ?'}"
                         for n in node.nics) or "none listed"
        parts.append(Text(f"NICs: {nics}"))
    findings = list(findings)
    if findings:
        parts.append(Text("\nHealth findings:", style="bold yellow"))
        parts.extend(Text(f"  {f}") for f in findings)
    notes = list(notes) + list(cluster.notes)
    if notes:
        parts.append(Text("\nNotes:", style="bold"))
        parts.extend(Text(f"  {tui_wording(n)}", style="dim") for n in notes)
    return Group(*parts)


class HardwareScreen(StepScreen):
    """Where the cluster comes from, what it looks like, and small edits (nodes, NIC speed)."""

    STEP = "hardware"
    AUTO_FOCUS = "#preset"

    def body(self) -> Iterable[Widget]:
        with Horizontal(classes="row top"):
            yield Label("Preset", classes="rowlabel")
            yield Select(preset_options(), prompt="pick a bundled cluster", id="preset", compact=True)
            yield Button("Probe host", id="probe", compact=True)
        with Horizontal(classes="row"):
            yield Label("File", classes="rowlabel")
            yield Field(placeholder="cluster.yaml", id="path", compact=True)
            yield Button("Load", id="load", compact=True)
            yield Button("Save", id="save", compact=True)
        with Horizontal(classes="row"):
            yield Label("Edit", classes="rowlabel")
            yield Button("+ node", id="add-node", compact=True)
            yield Label(" NIC Gb/s", classes="inlinelabel")
            yield Field(placeholder="10", id="nic-speed", compact=True, type="number", valid_empty=True)
            yield Button("Set NIC", id="set-nic", compact=True)
        with VerticalScroll(id="cluster-view", classes="panel"):
            yield Static("Probing this host…", id="cluster")

    def on_mount(self) -> None:
        w = self.wizard
        if w.start_cluster_file:
            self.query_one("#path", Input).value = w.start_cluster_file
            self.load_cluster("file", w.start_cluster_file)
        elif w.start_preset:
            self.load_cluster("preset", w.start_preset)
            self._select_preset(w.start_preset)
        elif w.probe_on_start:
            self.load_cluster("probe", None)
        else:
            self.query_one("#cluster", Static).update("Pick a preset, probe this host, or load a cluster file.")

    # ---- loading ------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="cluster", exit_on_error=False)
    def load_cluster(self, how: str, arg: Optional[str]) -> None:
        """Resolve the cluster off the UI thread (probing can take seconds)."""
        from ... import api

        self.app.call_from_thread(self._status, f"Loading {how}{' ' + arg if arg else ''}…")
        try:
            report = None
            if how == "preset":
                cluster, notes = api.resolve_cluster(None, preset=arg)
            elif how == "file":
                cluster, notes = api.resolve_cluster(arg)
            else:
                cluster, notes = api.resolve_cluster(None)
                if cluster.source.startswith("probe"):
                    report = api.probe()
            findings = health_findings(cluster, report)
        except Exception as exc:
            self.app.call_from_thread(self._failed, exc, f"Loading the cluster ({how})")
            return
        self.app.call_from_thread(self._loaded, cluster, notes, report, findings)

    def _select_preset(self, name: str) -> None:
        """Show `name` in the preset picker without re-triggering a load."""
        select = self.query_one("#preset", Select)
        if any(value == name for _, value in preset_options()):
            with select.prevent(Select.Changed):
                select.value = name

    def _status(self, text: "str | Text") -> None:
        self.query_one("#cluster", Static).update(text)

    def _failed(self, exc: BaseException, what: str) -> None:
        self.wizard.show_error(exc, what)
        if self.wizard.cluster is not None:
            self._show()
        else:
            self._status(Text(f"{what} failed: {error_line(exc)}", style="red"))

    def _loaded(self, cluster: Cluster, notes: list[str], report: Any, findings: list[str]) -> None:
        w = self.wizard
        w.cluster_notes, w.probe_report, self.findings = notes, report, findings
        w.cluster = cluster
        self._show()

    def _show(self) -> None:
        w = self.wizard
        if w.cluster is not None:
            self.query_one("#cluster", Static).update(
                render_cluster(w.cluster, w.cluster_notes, getattr(self, "findings", [])))

    # ---- controls -----------------------------------------------------------------------------------
    @on(Select.Changed, "#preset")
    def _preset_picked(self, event: Select.Changed) -> None:
        if event.value is not Select.NULL:
            self.load_cluster("preset", str(event.value))

    @on(Button.Pressed, "#probe")
    def _probe(self) -> None:
        self.load_cluster("probe", None)

    @on(Button.Pressed, "#load")
    @on(Input.Submitted, "#path")
    def _load(self) -> None:
        path = self.query_one("#path", Input).value.strip()
        if not path:
            self.notify("Type the path of a cluster file first.", severity="warning")
            return
        self.load_cluster("file", path)

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        w = self.wizard
        path = self.query_one("#path", Input).value.strip()
        if w.cluster is None or not path:
            self.notify("Load a cluster and type a file path to save to.", severity="warning")
            return
        try:
            from ...hardware.cluster_file import save_cluster

            save_cluster(w.cluster, path)
        except Exception as exc:
            w.show_error(exc, "Saving the cluster")
            return
        self.notify(f"Saved the cluster to {path}", title="Saved")

    @on(Button.Pressed, "#add-node")
    def _add_node(self) -> None:
        c = self.wizard.cluster
        if c is None:
            self.notify("Load a cluster first.", severity="warning")
            return
        self._edit(f"gpus={len(c.nodes) + 1}x{max(c.devices_per_node)}", "Adding a node")

    @on(Button.Pressed, "#set-nic")
    @on(Input.Submitted, "#nic-speed")
    def _set_nic(self) -> None:
        text = self.query_one("#nic-speed", Input).value.strip()
        try:
            speed = float(text)
            if speed <= 0:
                raise ValueError
        except ValueError:
            self.notify(f"NIC speed must be a positive number of Gb/s, got '{text}'.", severity="error")
            return
        if self.wizard.cluster is None:
            self.notify("Load a cluster first.", severity="warning")
            return
        self._edit(f"nic={speed:g}gbe", "Setting the NIC speed")

    def _edit(self, spec: str, what: str) -> None:
        """Apply a cluster edit through the ranking's what-if transformer (same rules as --what-if)."""
        w = self.wizard
        if w.cluster is None:
            return
        try:
            from ...ranking import apply_what_if

            cluster = apply_what_if(w.cluster, spec)
        except Exception as exc:
            w.show_error(exc, what)
            return
        w.cluster_notes = [*w.cluster_notes, f"edited: {spec}"]
        w.cluster = cluster
        self._show()
        self.notify(f"Cluster edited: {spec}")
