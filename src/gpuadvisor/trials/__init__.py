"""Trials: short real runs that confirm the cost model's top plans.

- `runner.run_trial`: one trainer run under torchrun in its own session, with a watchdog
  (`guard`), a wall-clock deadline and failure classification.
- `study.confirm`: an Optuna study seeded with the cost model's top plans.
- `store.MeasurementStore`: the local JSONL store of measured rows the learned model trains on.

This package's `__init__` stays import-light: `python -m gpuadvisor.trials.guard` must start fast.
"""
