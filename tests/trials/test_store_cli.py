"""Measurement store and `gpuadvisor measurements export|import|list`; URL masking; atomic appends."""
from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from gpuadvisor.cli import main
from gpuadvisor.errors import UserError
from gpuadvisor.schemas import MeasurementRow, Plan, TrialRecord
from gpuadvisor.trials.atomic import append_line
from gpuadvisor.trials.storage import mask_url, scrub, storage_url
from gpuadvisor.trials.store import MeasurementStore, rows_from_trial

from .planner_fixture import cpu_cluster


def _row(i: int, workload) -> MeasurementRow:
    return MeasurementRow(id=f"r{i}", source="test", source_group="local-x", cluster=cpu_cluster(), workload=workload,
                          plan=Plan(dp=2, devices_per_node=2, micro_batch_size=4), metric="tokens_per_s",
                          value=1000.0 + i, unit="tokens/s")


def test_rows_from_trial_and_store(tmp_path, workload, monkeypatch):
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path))
    plan = Plan(dp=2, devices_per_node=2, micro_batch_size=4)
    ok = TrialRecord(trial_id="s-t0001", study="s", plan=plan, status="ok", measured_tokens_per_s=123.0,
                     measured_peak_memory_bytes=456, predicted_tokens_per_s=100.0)
    oom = ok.model_copy(update={"trial_id": "s-t0002", "status": "oom", "measured_tokens_per_s": None})
    rows = rows_from_trial(ok, cpu_cluster(), workload) + rows_from_trial(oom, cpu_cluster(), workload)
    assert [r.metric for r in rows] == ["tokens_per_s", "peak_memory_bytes", "peak_memory_bytes"]
    assert rows[0].source_group.startswith("local-") and json.loads(rows[0].notes)["predicted_tokens_per_s"] == 100.0
    store = MeasurementStore()
    assert all(store.append(r) for r in rows) and not store.append(rows[0])  # duplicate id refused
    assert len(store.rows()) == 3
    with open(store.path, "a") as fh:  # a torn last line (crash mid-append) is skipped, next append repaired
        fh.write('{"id": "torn"')
    store.append(_row(9, workload))
    assert [r.id for r in store.rows()][-1] == "r9" and len(store.rows()) == 4


def _append_many(path: str, start: int) -> None:
    for i in range(start, start + 50):
        append_line(path, json.dumps({"i": i, "pad": "x" * 2000}))


def test_concurrent_appends_never_interleave(tmp_path):
    path = str(tmp_path / "m.jsonl")
    procs = [mp.Process(target=_append_many, args=(path, k * 100)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    lines = open(path).read().splitlines()
    assert len(lines) == 150 and len({json.loads(ln)["i"] for ln in lines}) == 150


def test_cli_export_import_list(tmp_path, workload, monkeypatch, capsys):
    monkeypatch.setenv("GPUADVISOR_HOME", str(tmp_path / "home"))
    src = tmp_path / "in.jsonl"
    src.write_text("".join(_row(i, workload).model_dump_json() + "\n" for i in range(3)))
    assert main(["measurements", "import", str(src)]) == 0
    assert "imported 3 rows" in capsys.readouterr().out
    assert main(["measurements", "import", str(src)]) == 0
    assert "3 duplicates skipped" in capsys.readouterr().out
    assert main(["measurements", "list"]) == 0
    assert capsys.readouterr().out.count("tokens_per_s") == 3
    out = tmp_path / "out.jsonl"
    assert main(["measurements", "export", "--out", str(out)]) == 0
    capsys.readouterr()
    assert [MeasurementRow.model_validate_json(ln).id for ln in out.read_text().splitlines()] == ["r0", "r1", "r2"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_row(7, workload).model_dump_json() + "\n" + '{"id": "x", "metric": "speed"}\n')
    assert main(["measurements", "import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and err.count("\n") == 1
    assert len(MeasurementStore().rows()) == 3  # nothing imported from an invalid file


def test_url_masking():
    url = "postgresql://alice:s3cr%40t@db.example:5432/studies"
    assert mask_url(url) == "postgresql://alice:***@db.example:5432/studies"
    assert "s3cr" not in scrub(f"could not connect to {url}: password s3cr%40t rejected", url)
    assert storage_url("postgresql://a:b@h/d").startswith("postgresql+psycopg")
    assert storage_url("/tmp/x.db") == "sqlite:////tmp/x.db"


def test_postgres_without_driver_names_the_extra(monkeypatch):
    """No psycopg/psycopg2 installed: one line naming the extra to install, never the password."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("psycopg") else real(name, *a))
    for url in ("postgresql://alice:pw@db/studies", "postgresql+psycopg2://alice:pw@db/studies"):
        with pytest.raises(UserError) as err:
            storage_url(url)
        msg = str(err.value)
        assert "pip install 'gpuadvisor[postgres]'" in msg and "psycopg2" in msg and ":pw@" not in msg
