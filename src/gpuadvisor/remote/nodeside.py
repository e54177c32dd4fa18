"""Small programs run ON a node (standard library only): facts for pre-flight, and a token reaper.

The advisor sends this file's source as `python -c <source> <command> ...` through the node's
access, so a node needs only a Python, not an import of gpuadvisor (fast, and works before the
versions are known to match). Each command prints one JSON object on stdout.

    facts [--bind-port P] [--ifname X]   versions, interfaces and their IPv4 addresses, port free?, GPU users
    reap --token T [--grace S]           SIGTERM, then SIGKILL, every process carrying GPUADVISOR_TRIAL_TOKEN=T
    pids --token T                       list those processes
"""
from __future__ import annotations

import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time

TOKEN_VAR = "GPUADVISOR_TRIAL_TOKEN"
DISTS = ("torch", "deepspeed", "gpuadvisor")


def _version(dist):
    """Installed version of a distribution (importlib.metadata; no import of the package)."""
    try:
        from importlib.metadata import version
        return version(dist)
    except Exception:
        return None


def _nccl_version():
    """The NCCL wheel torch uses (nvidia-nccl-cu*), or None."""
    try:
        from importlib.metadata import distributions
        for d in distributions():
            name = (d.metadata.get("Name") or "").lower()
            if name.startswith("nvidia-nccl"):
                return d.version
    except Exception:
        pass
    return None


def _ipv4(ifname):
    """The primary IPv4 address of an interface (SIOCGIFADDR), or None."""
    try:
        import fcntl
        import struct
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", ifname[:15].encode()))
        return socket.inet_ntoa(packed[20:24])
    except Exception:
        return None


def _interfaces():
    """{name: {ipv4, up, speed}} of every interface."""
    out = {}
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        names = []
    for n in names:
        info = {"ipv4": _ipv4(n)}
        for key, fname in (("operstate", "operstate"), ("speed", "speed"), ("mtu", "mtu")):
            try:
                with open(f"/sys/class/net/{n}/{fname}") as fh:
                    info[key] = fh.read().strip()
            except OSError:
                info[key] = None
        out[n] = info
    return out


def _port_free(port):
    """(free, why) for binding TCP `port` on every address (what torchrun's store does)."""
    for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            return True, None
        except OSError as exc:
            return False, exc.strerror or str(exc)
        finally:
            s.close()
    return False, "no socket family available"


def _gpu_users():
    """Compute processes on the GPUs (nvidia-smi), [] without GPUs; None when nvidia-smi fails."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=15)
    except FileNotFoundError:
        return [], False
    except (OSError, subprocess.TimeoutExpired):
        return None, True
    if done.returncode != 0:
        return None, True
    users = []
    for line in done.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            users.append({"pid": int(parts[0]), "name": parts[1], "used_mib": parts[2]})
    return users, True


def facts(args):
    port = None
    if "--bind-port" in args:
        port = int(args[args.index("--bind-port") + 1])
    users, has_smi = _gpu_users()
    out = {
        "hostname": socket.gethostname(), "python": platform.python_version(), "executable": sys.executable,
        "versions": {d: _version(d) for d in DISTS}, "nccl": _nccl_version(),
        "interfaces": _interfaces(), "nvidia_smi": has_smi, "gpu_users": users,
    }
    if port is not None:
        free, why = _port_free(port)
        out["port"] = {"port": port, "free": free, "error": why}
    return out


def _tagged(token):
    """Live pids whose initial environment carries TOKEN_VAR=token (never this process)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle not in fh.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().decode(errors="replace").rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            found.append(int(entry))
    return found


def reap(args):
    token = args[args.index("--token") + 1]
    grace = float(args[args.index("--grace") + 1]) if "--grace" in args else 3.0
    first = _tagged(token)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in _tagged(token):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        end = time.monotonic() + wait
        while time.monotonic() < end and _tagged(token):
            time.sleep(0.05)
        if not _tagged(token):
            break
    return {"found": sorted(first), "left": sorted(_tagged(token))}


def main(argv):
    if not argv:
        print(json.dumps({"error": "no command; use facts, reap or pids"}))
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "facts":
        print(json.dumps(facts(rest)))
    elif cmd == "reap":
        print(json.dumps(reap(rest)))
    elif cmd == "pids":
        print(json.dumps({"pids": _tagged(rest[rest.index("--token") + 1])}))
    else:
        print(json.dumps({"error": f"unknown command {cmd!r}"}))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def source() -> str:
    """This file's source text (sent as `python -c`)."""
    with open(__file__, encoding="utf-8") as fh:
        return fh.read()


def nodeside_argv(python: str, *args: str) -> list[str]:
    """`python -c <this source> args...` (the `__main__` guard runs main)."""
    return [python, "-c", source(), *args]
