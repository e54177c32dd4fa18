"""An emulated multi-node cluster on one Linux machine: network namespaces joined by shaped veth links.

Each "node" is a network namespace `gpa-<pid>-n<i>` holding one interface `gpaeth0` with the address
10.213.7.<10+i>/24. Two nodes are joined by a direct veth pair; more nodes hang off a bridge in a
switch namespace `gpa-<pid>-sw`. Every node's egress is shaped with `tc` (netem delay, then tbf rate),
so each direction of each link runs at the chosen rate. Processes started with
`ip netns exec gpa-<pid>-n<i> ...` share the host's filesystem and PID space (the same venv works)
but see only their namespace's network.

Traffic stays between these namespaces (one /24, never routed out). Namespaces are named with the
creating process's pid, so `clean_stale()` removes the leftovers of dead runs without touching a
concurrent run's. Test and benchmark helper, not product code.
"""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional

import yaml

SUBNET = "10.213.7"
IFNAME = "gpaeth0"
PREFIX = "gpa-"
NETNS_DIR = Path("/var/run/netns")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip ARGS...` (argument list, 10 s timeout)."""
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def _tc(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True, text=True, timeout=10,
                   check=True)


def unavailable_reason() -> Optional[str]:
    """Why namespaces cannot be used here (None when they can): not root, no `ip`/`tc`, or netns refused."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add); run the multi-node tests as root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' (iproute2) is not installed"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        done = _ip("netns", "add", probe, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"ip netns add failed: {exc}"
    if done.returncode != 0:
        return f"ip netns add is not permitted here: {done.stderr.strip()[:200]}"
    _ip("netns", "del", probe, check=False)
    return None


def list_namespaces() -> list[str]:
    """Names of the network namespaces `ip netns` knows."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale() -> list[str]:
    """Delete `gpa-<pid>-*` namespaces whose creating process is gone (and processes left inside them)."""
    removed = []
    for ns in list_namespaces():
        if not ns.startswith(PREFIX):
            continue
        owner = ns[len(PREFIX):].split("-", 1)[0]
        if owner.isdigit() and _pid_alive(int(owner)):
            continue
        kill_namespace_pids(ns)
        _ip("netns", "del", ns, check=False)
        removed.append(ns)
    return removed


def netns_inode(ns: str) -> Optional[int]:
    """Inode of the namespace's bind mount (what /proc/<pid>/ns/net points at)."""
    try:
        return os.stat(NETNS_DIR / ns).st_ino
    except OSError:
        return None


def pids_in_namespace(ns: str) -> list[int]:
    """Live processes whose network namespace is `ns` (scans /proc; zombies excluded)."""
    ino = netns_inode(ns)
    if ino is None:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") != f"net:[{ino}]":
                continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry))
    return found


def kill_namespace_pids(ns: str, timeout_s: float = 5.0) -> list[int]:
    """SIGKILL every process inside `ns` until none is left; returns the pids that were killed."""
    killed: set[int] = set()
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        pids = pids_in_namespace(ns)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, 9)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.05)
    return sorted(killed)


_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}


def tbf_burst(rate: str) -> str:
    """Token-bucket size for a tc rate: the bytes the rate sends in 0.125 ms, at least 2 KiB (one 1500-byte frame).

    A real NIC has no burst: it serialises every frame at line rate. Whatever the bucket holds leaves at veth
    speed after an idle spell, so the bucket must be small next to the messages a trainer sends: a 256 KiB
    bucket let PP's activations through unshaped, and "two timer ticks at HZ 250" (977 KiB at 1 Gbit/s) still
    let a 0.3M GPT's 1 MB gradient all-reduce cross at 600-880 MB/s on an emulated 1 Gbit/s link. tbf paces with
    hrtimers, so small buckets still reach the rate: measured through this module's namespaces (TCP, one
    message after a 50 ms idle spell): 50mbit -> 2 KiB: 64 KiB in 10.7 ms, 1 MiB in 176 ms (6.0 MB/s, the
    line's 6.25 less framing); 1gbit -> 16 KiB: 64 KiB in 0.49 ms, 1 MiB in 9.2 ms (114 MB/s).
    """
    for unit, mult in _UNITS.items():
        if rate.endswith(unit):
            bits = float(rate[: -len(unit)]) * mult
            return f"{max(2, math.ceil(bits / 8 * 0.125e-3 / 1024))}kb"
    raise ValueError(f"unknown tc rate '{rate}'; write e.g. 50mbit or 1gbit")


class EmulatedCluster:
    """N namespaces on one /24, each link shaped to `rate` (tc syntax: '50mbit', '1gbit'; None = unshaped)."""

    def __init__(self, n_nodes: int = 2, rate: Optional[str] = "1gbit", delay_ms: Optional[float] = None,
                 subnet: str = SUBNET):
        if not 2 <= n_nodes <= 8:
            raise ValueError("an emulated cluster has 2 to 8 nodes")
        self.n = n_nodes
        self.subnet = subnet
        self.tag = str(os.getpid())
        self.names = [f"{PREFIX}{self.tag}-n{i}" for i in range(n_nodes)]
        self.switch = f"{PREFIX}{self.tag}-sw" if n_nodes > 2 else None
        self.addresses = [f"{subnet}.{10 + i}" for i in range(n_nodes)]
        self.ifname = IFNAME
        self.rate, self.delay_ms = rate, delay_ms
        self._up = False

    # ------------------------------------------------------------------ lifecycle
    def up(self) -> "EmulatedCluster":
        """Create the namespaces, links, addresses and shaping (tears down on failure)."""
        try:
            self._create()
        except BaseException:
            self.down()
            raise
        self._up = True
        return self

    def _create(self) -> None:
        for ns in self.names + ([self.switch] if self.switch else []):
            if ns in list_namespaces():
                kill_namespace_pids(ns)
                _ip("netns", "del", ns, check=False)
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        short = f"g{int(self.tag) % 100000:05d}"  # root-namespace names are <= 15 characters
        if self.switch is None:
            a, b = f"{short}a", f"{short}b"
            _ip("link", "add", a, "type", "veth", "peer", "name", b)
            _ip("link", "set", a, "netns", self.names[0])
            _ip("link", "set", b, "netns", self.names[1])
            pairs = [(self.names[0], a), (self.names[1], b)]
        else:
            _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", self.switch, "link", "set", "br0", "up")
            pairs = []
            for i, ns in enumerate(self.names):
                a, b = f"{short}n{i}", f"{short}s{i}"
                _ip("link", "add", a, "type", "veth", "peer", "name", b)
                _ip("link", "set", a, "netns", ns)
                _ip("link", "set", b, "netns", self.switch)
                _ip("-n", self.switch, "link", "set", b, "master", "br0")
                _ip("-n", self.switch, "link", "set", b, "up")
                pairs.append((ns, a))
        for (ns, dev), addr in zip(pairs, self.addresses):
            _ip("-n", ns, "link", "set", dev, "name", self.ifname)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", self.ifname)
            _ip("-n", ns, "link", "set", self.ifname, "up")
        self.shape(self.rate, self.delay_ms)

    def shape(self, rate: Optional[str], delay_ms: Optional[float] = None) -> None:
        """(Re)shape every node's egress: netem delay (if any) then tbf rate (if any); None/None = unshaped."""
        self.rate, self.delay_ms = rate, delay_ms
        for ns in self.names:
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", self.ifname, "root"],
                           capture_output=True, timeout=10, check=False)
            tbf = ["tbf", "rate", rate, "burst", tbf_burst(rate), "latency", "50ms"] if rate else []
            if delay_ms:
                try:
                    _tc(ns, "qdisc", "add", "dev", self.ifname, "root", "handle", "1:", "netem", "delay",
                        f"{delay_ms}ms")
                except subprocess.CalledProcessError as exc:
                    raise RuntimeError("tc netem (kernel module sch_netem) is not available here: "
                                       "emulate the rate only (delay_ms=None)") from exc
                if tbf:
                    _tc(ns, "qdisc", "add", "dev", self.ifname, "parent", "1:1", "handle", "10:", *tbf)
            elif tbf:
                _tc(ns, "qdisc", "add", "dev", self.ifname, "root", *tbf)

    def down(self) -> None:
        """Kill every process inside the namespaces and delete them (idempotent)."""
        for ns in self.names + ([self.switch] if self.switch else []):
            kill_namespace_pids(ns)
            _ip("netns", "del", ns, check=False)
        self._up = False

    def __enter__(self) -> "EmulatedCluster":
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()

    # ------------------------------------------------------------------ cluster files
    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(self.n)]

    def access(self, i: int, **override: object) -> dict:
        """The `access:` mapping of node i (method prefix: ip netns exec <ns>)."""
        acc = {"method": "prefix", "prefix": ["ip", "netns", "exec", self.names[i]],
               "address": self.addresses[i], "ifname": self.ifname}
        acc.update(override)
        return acc

    def cluster_doc(self, *, cpu_ranks: int = 1, ram_gib: float = 4.0, network: Optional[dict] = None,
                    access_override: Optional[dict[int, dict]] = None, cores: int = 1,
                    device_rates: Optional[dict] = None) -> dict:
        """The concise cluster-file document of the emulated cluster (one CPU rank per node by default)."""
        nodes = []
        for i, name in enumerate(self.node_names()):
            nodes.append({"name": name, "cpu_ranks": cpu_ranks,
                          "cpu": {"cores": cores, "threads": cores, "ram_gib": ram_gib},
                          "access": self.access(i, **(access_override or {}).get(i, {}))})
            if device_rates:
                nodes[-1]["device_rates"] = dict(device_rates)
        net = network or {"link": "1gbe", "nic": self.ifname}
        return {"name": f"emulated-{self.n}n", "source": "tests/multinode/emucluster.py (network namespaces)",
                "nodes": nodes, "network": net}

    def write_cluster_file(self, path: os.PathLike, **kwargs: object) -> Path:
        """Write cluster_doc(**kwargs) as YAML and return the path."""
        path = Path(path)
        path.write_text(yaml.safe_dump(self.cluster_doc(**kwargs), sort_keys=False))
        return path

    def leftover_pids(self) -> dict[str, list[int]]:
        """Processes still alive in each node namespace (should be empty after every run)."""
        return {ns: pids for ns in self.names if (pids := pids_in_namespace(ns))}
