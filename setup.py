"""Build hook: ship the top-level knowledge/ and probes/ folders inside the wheel.

They live at the repository root (data with sources, standalone probe programs) and are
copied into ``gpuadvisor/_data/`` at build time; ``gpuadvisor.paths`` finds them there in an
installed package and falls back to the repository root in a source checkout.
"""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
SHIPPED = ("knowledge", "probes")


class BuildWithData(build_py):
    def run(self):
        super().run()
        for name in SHIPPED:
            src = ROOT / name
            dst = Path(self.build_lib) / "gpuadvisor" / "_data" / name
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithData})
