"""`gpuadvisor measurements export|import|list`: the local store of measured rows."""
from __future__ import annotations

import argparse
import sys


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `measurements` subcommand and its actions."""
    p = sub.add_parser("measurements", help="export, import or list the local measurement store",
                       description="The measured rows trials append (the learned correction trains on them).")
    p.add_argument("--store", help="store file (default: <user data dir>/measurements.jsonl)")
    acts = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    e = acts.add_parser("export", help="write every row as JSONL")
    e.add_argument("--out", help="file to write (default: stdout)")
    e.set_defaults(func=_export)
    i = acts.add_parser("import", help="validate and add rows from a JSONL file (duplicate ids skipped)")
    i.add_argument("file")
    i.set_defaults(func=_import)
    ls = acts.add_parser("list", help="one line per row")
    ls.add_argument("--json", action="store_true", help="print rows as JSON lines")
    ls.set_defaults(func=_list)


def _store(args: argparse.Namespace):
    """The store the arguments name."""
    from ..trials.store import MeasurementStore

    return MeasurementStore(args.store)


def _export(args: argparse.Namespace) -> int:
    if args.out:
        from .argtypes import check_writable

        check_writable(args.out, "--out")
    store = _store(args)
    text = store.export(args.out)
    if args.out:
        print(f"wrote {text.count(chr(10))} rows to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _import(args: argparse.Namespace) -> int:
    store = _store(args)
    added, skipped = store.import_file(args.file)
    print(f"imported {added} rows into {store.path} ({skipped} duplicates skipped)")
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = _store(args).rows()
    if args.json:
        for r in rows:
            print(r.model_dump_json())
        return 0
    if not rows:
        print("no measurements yet (run `gpuadvisor suggest ... --confirm K` or `gpuadvisor measurements import FILE`)")
        return 0
    from .console import Column, emit, make_table

    table = make_table(Column("id", overflow="fold"), Column("metric", overflow="fold"),
                       Column("value", justify="right", no_wrap=True), Column("unit", no_wrap=True),
                       Column("strategy", overflow="fold"), Column("source", overflow="fold"))
    for r in rows:
        table.add_row(r.id, r.metric, f"{r.value:.6g}", r.unit, r.plan.strategy, r.source_group)
    emit(table)
    print(f"{len(rows)} rows", file=sys.stderr)
    return 0
