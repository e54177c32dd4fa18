"""CI: check what `python -m build` made (an sdist, and a wheel built from it) carries the shipped data.

Usage: python .ci/check_dist.py DIST_DIR. Exits non-zero naming what is missing.
"""
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(dist: Path) -> int:
    sdists, wheels = sorted(dist.glob("gpuadvisor-*.tar.gz")), sorted(dist.glob("gpuadvisor-*.whl"))
    if len(sdists) != 1 or len(wheels) != 1:
        print(f"check_dist: expected one sdist and one wheel in {dist}, found {sdists + wheels}", file=sys.stderr)
        return 1
    with tarfile.open(sdists[0]) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    with zipfile.ZipFile(wheels[0]) as whl:
        in_wheel = set(whl.namelist())
    data = [p.relative_to(ROOT).as_posix() for d in ("knowledge", "probes") for p in (ROOT / d).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts]
    missing = [f"sdist:{f}" for f in ["LICENSE", "setup.py", *data] if f not in in_sdist]
    missing += [f"wheel:gpuadvisor/_data/{f}" for f in data if f"gpuadvisor/_data/{f}" not in in_wheel]
    missing += [f"wheel:{f}" for f in ("gpuadvisor/py.typed", "gpuadvisor/tui/app.tcss") if f not in in_wheel]
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in in_wheel):
        missing.append("wheel:*.dist-info/licenses/LICENSE")
    if missing:
        print(f"check_dist: {len(missing)} file(s) missing, e.g. {missing[:5]}", file=sys.stderr)
        return 1
    print(f"check_dist: {sdists[0].name} ({len(in_sdist)} files) and {wheels[0].name} ({len(in_wheel)} files) "
          f"carry knowledge/ and probes/ ({len(data)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
