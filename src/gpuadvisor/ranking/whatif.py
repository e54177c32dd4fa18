"""What-if edits of a cluster: another NIC, another GPU count/layout, another in-node link."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from ..errors import UserError
from ..paths import knowledge_dir
from ..schemas import Cluster, LinkClass, Network
from ..safe_yaml import load_bundled_yaml

_HELP = "write e.g. 'nic=10gbe', 'gpus=2x4' (nodes x GPUs per node) or 'link=nvlink'"


@lru_cache(maxsize=1)
def _links() -> dict[str, Any]:
    with open(knowledge_dir() / "links.yaml", encoding="utf-8") as fh:
        return load_bundled_yaml(fh) or {}


def _network(key: str) -> Network:
    for n in _links().get("network", []):
        if n["key"] == key:
            return Network(bandwidth_gb_per_s=float(n["bandwidth_gb_per_s"]), latency_us=float(n["latency_us"]),
                           protocol=n.get("protocol", "tcp"), link_speed_gbit_per_s=n.get("link_speed_gbit_per_s"),
                           rate_source="catalog")
    keys = ", ".join(n["key"] for n in _links().get("network", []))
    raise UserError(f"what-if: unknown network '{key}'; use one of {keys}")


def _resize(cluster: Cluster, nodes: int, per_node: int) -> Cluster:
    """Same device type, `nodes` nodes of `per_node` devices (links copied from the first node)."""
    if nodes < 1 or per_node < 1:
        raise UserError(f"what-if: gpus={nodes}x{per_node} must be positive; {_HELP}")
    src = cluster.nodes[0]
    dev0 = src.devices[0]
    devices = [dev0.model_copy(update={"index": i}) for i in range(per_node)]
    tmpl = src.links[0] if src.links else None
    links = []
    for a in range(per_node):
        for b in range(a + 1, per_node):
            old = src.link(a, b) or tmpl
            if old is not None:
                links.append(old.model_copy(update={"a": a, "b": b}))
    new_nodes = [src.model_copy(update={"name": f"{src.name.rsplit('-', 1)[0]}-{i}" if nodes > 1 else src.name,
                                        "devices": devices, "links": links}) for i in range(nodes)]
    net = cluster.network
    if nodes > 1 and net is None:
        net = _network("25gbe")
    return cluster.model_copy(update={"nodes": new_nodes, "network": net if nodes > 1 else cluster.network,
                                      "name": f"{cluster.name} [gpus={nodes}x{per_node}]"})


def _relink(cluster: Cluster, kind: str) -> Cluster:
    """Replace every in-node link by NVLink3 x4 or a PCIe switch (PIX), rates from knowledge/links.yaml."""
    lk = _links()
    if kind == "nvlink":
        nv = lk["nvlink"]
        per_link = max(float(g["per_link_one_way_gb_per_s"]) for g in nv["generations"] if int(g["gen"]) == 3)
        upd = {"link_class": LinkClass.NVLINK, "nvlink_count": 4, "p2p_supported": True, "rate_source": "assumed",
               "bandwidth_gb_per_s": float(nv["efficiency"]) * 4 * per_link, "latency_us": float(nv["latency_us"])}
    elif kind in ("pcie", "pix"):
        pc = lk["pcie"]
        dev = cluster.nodes[0].devices[0]
        gen, width = dev.pcie_gen or 4, dev.pcie_width or 16
        wire = float(pc["wire_gb_per_s_per_lane"][gen]) * width
        cls = pc["classes"]["PIX"]
        upd = {"link_class": LinkClass.PIX, "nvlink_count": 0, "p2p_supported": True, "rate_source": "assumed",
               "bandwidth_gb_per_s": float(cls["efficiency"]) * wire, "latency_us": float(cls["latency_us"])}
    else:
        raise UserError(f"what-if: unknown link '{kind}'; use nvlink or pcie")
    nodes = [n.model_copy(update={"links": [lk.model_copy(update=upd) for lk in n.links]}) for n in cluster.nodes]
    return cluster.model_copy(update={"nodes": nodes, "name": f"{cluster.name} [link={kind}]"})


def apply_what_if(cluster: Cluster, spec: str) -> Cluster:
    """Apply 'nic=10gbe', 'gpus=2x4' or 'link=nvlink' (comma-separated for several) to a cluster."""
    out = cluster
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if "=" not in item:
            raise UserError(f"what-if '{item}' is not key=value; {_HELP}")
        k, v = (s.strip().lower() for s in item.split("=", 1))
        if k in ("nic", "network", "net"):
            out = out.model_copy(update={"network": _network(v), "name": f"{out.name} [nic={v}]"})
        elif k == "gpus":
            parts = v.split("x")
            if len(parts) != 2 or not all(p.isdecimal() for p in parts):
                raise UserError(f"what-if gpus='{v}' is not NODESxGPUS; {_HELP}")
            out = _resize(out, int(parts[0]), int(parts[1]))
        elif k == "link":
            out = _relink(out, v)
        else:
            raise UserError(f"what-if key '{k}' unknown; {_HELP}")
    return out
