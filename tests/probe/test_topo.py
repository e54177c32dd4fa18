"""The `nvidia-smi topo -m` parser against real captures (tests/fixtures/topo/README.md) and odd inputs."""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest

from gpuadvisor.errors import UserError
from gpuadvisor.probe.topo import TopoParseError, classify_token, parse_topo
from gpuadvisor.schemas.hardware import LinkClass

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "topo"
L = LinkClass


def load(name: str):
    """Parse one fixture file."""
    return parse_topo((FIXTURES / name).read_text())


def pairs(spec: str) -> list[tuple[int, int]]:
    """'0-1 2-3' -> [(0, 1), (2, 3)]."""
    return [tuple(int(x) for x in p.split("-")) for p in spec.split()]  # type: ignore[misc]


def link(m, a: str, b: str):
    """The link between two labels, either order."""
    for lk in m.links:
        if {lk.a, lk.b} == {a, b}:
            return lk
    raise AssertionError(f"no link {a}-{b}")


def check_gpu_pairs(m, n: int, expected: dict[str, str], default: str | None = None) -> None:
    """Every GPU pair has the expected token (class and NVLink count checked through the token)."""
    want: dict[tuple[int, int], str] = {}
    for token, spec in expected.items():
        for p in pairs(spec):
            want[tuple(sorted(p))] = token  # type: ignore[index]
    assert m.gpus == [f"GPU{i}" for i in range(n)]
    for i, j in combinations(range(n), 2):
        token = want.get((i, j), default)
        assert token is not None, f"test lists no class for GPU{i}-GPU{j}"
        lk = m.gpu_link(i, j)
        assert lk is not None
        klass, count = classify_token(token)
        assert (lk.link_class, lk.nvlink_count) == (klass, count), (i, j, lk.token, token)


def check_nics(m, table: dict[tuple[int, str], str], default: str) -> None:
    """Every GPU–NIC pair has the listed token, else the default."""
    for g in m.gpus:
        for nic in m.nics:
            token = table.get((int(g[3:]), nic), default)
            assert link(m, g, nic).link_class == classify_token(token)[0], (g, nic, token)


def test_03_dgx1_p100_soc_mangled_header():
    m = load("03_dgx1-p100-soc-mangled-header.txt")
    check_gpu_pairs(
        m, 8,
        {"NV1": "0-1 0-2 0-3 0-4 1-2 1-3 1-5 2-3 2-6 3-7 4-5 4-6 4-7 5-6 5-7 6-7",
         "SOC": "0-5 0-6 0-7 1-4 1-6 1-7 2-4 2-5 2-7 3-4 3-5 3-6"},
    )
    assert m.nics == ["mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3"]
    t = {}
    for g, pix, phb in [(0, "mlx5_0", "mlx5_1"), (1, "mlx5_0", "mlx5_1"), (2, "mlx5_1", "mlx5_0"),
                        (3, "mlx5_1", "mlx5_0"), (4, "mlx5_2", "mlx5_3"), (5, "mlx5_2", "mlx5_3"),
                        (6, "mlx5_3", "mlx5_2"), (7, "mlx5_3", "mlx5_2")]:
        t[(g, pix)], t[(g, phb)] = "PIX", "PHB"
    check_nics(m, t, "SOC")
    assert link(m, "GPU0", "GPU5").token == "SOC" and link(m, "GPU0", "GPU5").link_class is L.SYS
    assert m.cpu_affinity["GPU3"] == "1-1" and m.warnings == []


def test_04_dgx1_v100_nv1_nv2():
    m = load("04_dgx1-v100-nv1-nv2-4xmlx5.txt")
    check_gpu_pairs(
        m, 8,
        {"NV1": "0-1 0-2 1-3 2-6 3-7 4-5 4-6 5-7", "NV2": "0-3 0-4 1-2 1-5 2-3 4-7 5-6 6-7",
         "SYS": "0-5 0-6 0-7 1-4 1-6 1-7 2-4 2-5 2-7 3-4 3-5 3-6"},
    )
    assert m.gpu_link(0, 3).nvlink_count == 2 and m.gpu_link(0, 1).nvlink_count == 1
    t = {}
    for g, pix, phb in [(0, "mlx5_0", "mlx5_1"), (1, "mlx5_0", "mlx5_1"), (2, "mlx5_1", "mlx5_0"),
                        (3, "mlx5_1", "mlx5_0"), (4, "mlx5_2", "mlx5_3"), (5, "mlx5_2", "mlx5_3"),
                        (6, "mlx5_3", "mlx5_2"), (7, "mlx5_3", "mlx5_2")]:
        t[(g, pix)], t[(g, phb)] = "PIX", "PHB"
    check_nics(m, t, "SYS")
    assert m.numa_affinity == {} and m.cpu_affinity["GPU4"] == "20-39,60-79"


def test_05_topo_mp_pcie_only():
    m = load("05_dgx1-topo-mp-pcie-only-no-nv-legend.txt")
    cross = " ".join(f"{a}-{b}" for a in range(4) for b in range(4, 8))
    check_gpu_pairs(m, 8, {"PIX": "0-1 2-3 4-5 6-7", "PHB": "0-2 0-3 1-2 1-3 4-6 4-7 5-6 5-7", "SYS": cross})
    t = {}
    for k in range(4):
        nic, mates = f"mlx5_{k}", (2 * k, 2 * k + 1)
        other = (2 * k + 2, 2 * k + 3) if k % 2 == 0 else (2 * k - 2, 2 * k - 1)
        for g in mates:
            t[(g, nic)] = "PIX"
        for g in other:
            t[(g, nic)] = "PHB"
    check_nics(m, t, "SYS")
    assert [m.numa_affinity[g] for g in m.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_06_dgx_a100_nv12_named_nic_columns():
    m = load("06_dgx-a100-nv12-12xmlx5-named-cols.txt")
    check_gpu_pairs(m, 8, {}, default="NV12")
    assert m.nics == [f"mlx5_{i}" for i in range(12)]
    t = {}
    for gs, ns in [((0, 1), (0, 1)), ((2, 3), (2, 3)), ((4, 5), (6, 7)), ((6, 7), (8, 9))]:
        for g in gs:
            for n in ns:
                t[(g, f"mlx5_{n}")] = "PXB"
    check_nics(m, t, "SYS")
    assert link(m, "mlx5_4", "mlx5_5").link_class is L.PIX
    assert link(m, "mlx5_10", "mlx5_11").link_class is L.PIX
    assert [m.numa_affinity[g] for g in m.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]
    assert m.gpu_numa_id == {}


def test_07_power9_numa8():
    m = load("07_traverse-power9-4xv100-nv3-numa8.txt")
    check_gpu_pairs(m, 4, {"NV3": "0-1 2-3", "SYS": "0-2 0-3 1-2 1-3"})
    t = {(g, f"mlx5_{n}"): "NODE" for g in (0, 1) for n in (0, 1)}
    t.update({(g, f"mlx5_{n}"): "NODE" for g in (2, 3) for n in (2, 3)})
    check_nics(m, t, "SYS")
    assert link(m, "mlx5_0", "mlx5_1").link_class is L.PIX and link(m, "mlx5_2", "mlx5_3").link_class is L.PIX
    assert [m.numa_affinity[g] for g in m.gpus] == [0, 0, 8, 8]
    assert "mlx5_0" not in m.cpu_affinity and m.warnings == []


def test_08_della_pcie_sys():
    m = load("08_della-2xa100-pcie-sys-2xmlx5.txt")
    check_gpu_pairs(m, 2, {"SYS": "0-1"})
    check_nics(m, {(0, "mlx5_0"): "NODE", (1, "mlx5_1"): "NODE"}, "SYS")
    assert m.numa_affinity == {"GPU0": 0, "GPU1": 1}


def test_09_polaris_mixed_header_separators():
    m = load("09_polaris-4xa100-nv4-header-mixed-separators.txt")
    check_gpu_pairs(m, 4, {}, default="NV4")
    check_nics(m, {(3, "mlx5_0"): "PHB", (1, "mlx5_1"): "PHB"}, "SYS")
    assert [m.numa_affinity[g] for g in m.gpus] == [3, 2, 1, 0]
    assert m.cpu_affinity["GPU3"] == "0-7,32-39" and m.warnings == []


def test_10_ansi_header_three_gpus():
    m = load("10_3x-rtxa6000-nv4-pair-plus-node-ansi-header.txt")
    check_gpu_pairs(m, 3, {"NV4": "0-1", "NODE": "0-2 1-2"})
    assert m.nics == [] and m.numa_affinity == {"GPU0": 0, "GPU1": 0, "GPU2": 0}


def test_19_h800_nic_legend_empty_affinity():
    m = load("19_h800-4gpu-nv8-17nic-ansi-empty-affinity.txt")
    check_gpu_pairs(m, 4, {}, default="NV8")
    assert m.nics == [f"NIC{i}" for i in range(17)]
    assert m.nic_names == {f"NIC{i}": f"mlx5_{i}" for i in range(17)}
    t = {(0, "NIC4"): "PIX", (0, "NIC13"): "PIX", (1, "NIC6"): "PIX", (1, "NIC14"): "PIX",
         (2, "NIC7"): "PIX", (2, "NIC15"): "PIX", (3, "NIC8"): "PIX", (3, "NIC16"): "PIX"}
    check_nics(m, t, "SYS")
    nic_pix = {(0, 9), (1, 10), (2, 11), (3, 12), (4, 13), (6, 14), (7, 15), (8, 16)}
    for a, b in combinations(range(17), 2):
        want = L.PIX if (a, b) in nic_pix else L.SYS
        assert link(m, f"NIC{a}", f"NIC{b}").link_class is want, (a, b)
    assert m.cpu_affinity == {}
    assert m.numa_affinity == {g: None for g in m.gpus} and m.gpu_numa_id == {g: None for g in m.gpus}
    assert m.warnings == []


def test_20_paper_appendix_d_spaces():
    m = load("20_a6000-paper-4gpu-pxb-pix-spaces.txt")
    check_gpu_pairs(m, 4, {"PIX": "2-3"}, default="PXB")
    assert m.nics == ["NIC0", "NIC1"]
    check_nics(m, {}, "SYS")
    assert m.numa_affinity == {g: 0 for g in m.gpus} and m.gpu_numa_id == {g: None for g in m.gpus}
    assert any("NIC0, NIC1" in w for w in m.warnings)


def test_21_h100_nvswitch_truncated_nic_rows():
    m = load("21_h100-8gpu-nv18-9nic-truncated-nic-rows.txt")
    check_gpu_pairs(m, 8, {}, default="NV18")
    pix = {0: 8, 1: 7, 2: 6, 3: 5, 4: 4, 5: 3, 6: 2, 7: 1}
    t = {}
    for g in range(8):
        near = range(5, 9) if g < 4 else range(1, 5)
        for n in near:
            t[(g, f"NIC{n}")] = "PIX" if n == pix[g] else "NODE"
    check_nics(m, t, "SYS")
    assert [m.numa_affinity[g] for g in m.gpus] == [0] * 4 + [1] * 4
    assert any("NIC6, NIC7, NIC8" in w for w in m.warnings)


def test_22_8x_4090_pcie():
    m = load("22_8x-rtx4090-pcie-sys-phb-2nic-no-legend.txt")
    check_gpu_pairs(m, 8, {}, default="SYS")
    check_nics(m, {(6, "NIC0"): "PHB", (6, "NIC1"): "PHB"}, "SYS")
    assert link(m, "NIC0", "NIC1").link_class is L.PIX and m.nic_names == {}
    assert m.cpu_affinity["GPU7"] == "56-111,168-223" and m.warnings == []


def test_23_p2p_matrix_below_is_ignored():
    m = load("23_2x-rtx5090-phb-p2p-matrix-below.txt")
    check_gpu_pairs(m, 2, {"PHB": "0-1"})
    assert len(m.links) == 1 and m.numa_affinity == {"GPU0": 0, "GPU1": 0}
    assert m.gpu_numa_id == {"GPU0": None, "GPU1": None} and m.warnings == []


def test_24_single_gpu():
    m = load("24_1x-tesla-p4-single-gpu-numa-na.txt")
    assert m.gpus == ["GPU0"] and m.links == [] and m.nics == []
    assert m.cpu_affinity == {"GPU0": "0-7"}
    assert m.numa_affinity == {"GPU0": None} and m.gpu_numa_id == {"GPU0": None}


def test_25_indented_space_separated_with_p2p():
    m = load("25_2gpu-node-indented-spaces-wrapped-legend-p2p.txt")
    check_gpu_pairs(m, 2, {"NODE": "0-1"})
    assert m.cpu_affinity == {"GPU0": "0-15", "GPU1": "0-15"} and m.numa_affinity == {"GPU0": 0, "GPU1": 0}


def test_26_single_h200_in_a_vm():
    m = load("26_1x-h200-firecracker-vm-ansi-header.txt")
    assert m.gpus == ["GPU0"] and m.links == [] and m.nics == [] and not m.warnings
    assert m.cpu_affinity == {"GPU0": "0-15"}
    assert m.numa_affinity == {"GPU0": 0} and m.gpu_numa_id == {"GPU0": None}


def test_every_fixture_has_a_test():
    names = {p.name[:2] for p in FIXTURES.glob("*.txt")}
    tested = {n.split("_")[1] for n in globals() if n.startswith("test_") and n.split("_")[1].isdigit()}
    assert names == tested


@pytest.mark.parametrize(
    "token,klass,count",
    [("X", L.SELF, 0), (" X ", L.SELF, 0), ("NV1", L.NVLINK, 1), ("NV18", L.NVLINK, 18), ("PIX", L.PIX, 0),
     ("PXB", L.PXB, 0), ("PHB", L.PHB, 0), ("NODE", L.NODE, 0), ("SYS", L.SYS, 0), ("SOC", L.SYS, 0),
     ("N/A", L.UNKNOWN, 0), ("C2C", L.UNKNOWN, 0), ("", L.UNKNOWN, 0)],
)
def test_classify_token(token, klass, count):
    assert classify_token(token) == (klass, count)


def test_unknown_token_warns_and_is_unknown():
    m = parse_topo("\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tFOO\t X \n")
    assert m.gpu_link(0, 1).link_class is L.UNKNOWN and m.gpu_link(0, 1).token == "FOO"
    assert any("FOO" in w for w in m.warnings)


def test_na_cell_and_asymmetry_warn():
    m = parse_topo("\tGPU0\tGPU1\tGPU2\nGPU0\t X \tN/A\tPIX\nGPU1\tN/A\t X \tPHB\nGPU2\tPIX\tSYS\t X \n")
    assert m.gpu_link(0, 1).link_class is L.UNKNOWN
    assert m.gpu_link(1, 2).link_class is L.PHB
    assert any("GPU1-GPU2" in w and "SYS" in w for w in m.warnings)


def test_no_header_uses_row_labels():
    m = parse_topo("GPU0 X NV2 0-7\nGPU1 NV2 X 0-7\n")
    assert m.gpu_link(0, 1).nvlink_count == 2 and m.cpu_affinity == {"GPU0": "0-7", "GPU1": "0-7"}
    assert any("no header" in w for w in m.warnings)


def test_windows_line_endings_and_trailing_tabs():
    m = parse_topo("\tGPU0\tGPU1\tCPU Affinity\r\nGPU0\t X \tPXB\t0-3\t\t\r\nGPU1\tPXB\t X \t0-3\t\t\r\n")
    assert m.gpu_link(0, 1).link_class is L.PXB and m.cpu_affinity["GPU1"] == "0-3"


@pytest.mark.parametrize(
    "text",
    ["", "hello world", "Legend:\n  X = Self\n", "\tGPU0\tGPU1\n", "GPU0\tPIX\tPIX\n",
     "\tGPU0\tGPU1\tGPU2\nGPU0\t X \nGPU1\tPIX\t X \n", "NIC0\t X \tPIX\nNIC1\tPIX\t X \n"],
)
def test_garbage_raises_typed_user_error(text):
    with pytest.raises(TopoParseError) as info:
        parse_topo(text)
    assert isinstance(info.value, UserError) and "\n" not in str(info.value)


@pytest.mark.parametrize("name, groups", [
    # DGX-1 (P100, V100) and DGX A100: two GPUs per PCIe switch, seen through the GPU pairs (topo -mp) or the NICs
    ("03_dgx1-p100-soc-mangled-header.txt", [0, 0, 2, 2, 4, 4, 6, 6]),
    ("04_dgx1-v100-nv1-nv2-4xmlx5.txt", [0, 0, 2, 2, 4, 4, 6, 6]),
    ("05_dgx1-topo-mp-pcie-only-no-nv-legend.txt", [0, 0, 2, 2, 4, 4, 6, 6]),
    ("06_dgx-a100-nv12-12xmlx5-named-cols.txt", [0, 0, 2, 2, 4, 4, 6, 6]),
    # seed 001's A6000 box: one switch tree for all four (PXB/PIX)
    ("20_a6000-paper-4gpu-pxb-pix-spaces.txt", [0, 0, 0, 0]),
    # each H100/H800 on its own switch with its own NICs; PCIe boxes whose GPUs meet at the host bridge or CPU
    ("21_h100-8gpu-nv18-9nic-truncated-nic-rows.txt", [None] * 8),
    ("19_h800-4gpu-nv8-17nic-ansi-empty-affinity.txt", [None] * 4),
    ("22_8x-rtx4090-pcie-sys-phb-2nic-no-legend.txt", [None] * 8),
    ("08_della-2xa100-pcie-sys-2xmlx5.txt", [None, None]),
])
def test_pcie_switch_groups_from_real_captures(name, groups):
    from gpuadvisor.probe.topo import pcie_switch_groups

    assert pcie_switch_groups(load(name)) == groups
