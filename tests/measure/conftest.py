"""Helpers for the measuring-probe tests: load a standalone probe file as a module."""
import importlib.util

import pytest

from gpuadvisor.paths import probes_dir


def load_probe(name: str):
    """Import probes/<name>.py by path (the probes are scripts, not a package)."""
    path = probes_dir() / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"gpuadvisor_probe_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def collectives_probe():
    return load_probe("collectives")


@pytest.fixture(scope="session")
def matmul_probe():
    return load_probe("matmul")


@pytest.fixture(scope="session")
def hostcopy_probe():
    return load_probe("hostcopy")
