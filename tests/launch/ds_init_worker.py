"""Run under torchrun (2 CPU ranks, gloo): load each DeepSpeed config with DeepSpeed's own DeepSpeedConfig and,
where the CPU accelerator supports its precision, deepspeed.initialize a tiny model with a client torch optimizer
and take one step. Rank 0 writes {name: "ok" | "config-only: <why>" | "error: <why>"} to argv[2]."""
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402


def run_one(cfg: dict) -> str:
    DeepSpeedConfig(cfg)  # the parser DeepSpeed itself uses (batch arithmetic, zero section, offload)
    if cfg.get("fp16", {}).get("enabled"):
        return "config-only: DeepSpeed's CPU accelerator does not support fp16"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # a client optimizer, as a user's script has
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), optimizer=opt, config=cfg)
    dtype = next(engine.module.parameters()).dtype
    for _ in range(cfg["gradient_accumulation_steps"]):
        x = torch.randn(cfg["train_micro_batch_size_per_gpu"], 16, dtype=dtype)
        loss = engine(x).float().pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.destroy()
    return "ok"


def main() -> None:
    configs = json.loads(open(sys.argv[1]).read())
    deepspeed.init_distributed(dist_backend="gloo")
    out = {}
    for name, cfg in configs.items():
        try:
            out[name] = run_one(cfg)
        except Exception as exc:  # noqa: BLE001 - reported per config
            out[name] = f"error: {type(exc).__name__}: {exc}"
    if int(os.environ.get("RANK", "0")) == 0:
        with open(sys.argv[2], "w") as fh:
            json.dump(out, fh, indent=1)
    # meet before tearing down: a gloo rank that destroys its group while its peer still sends can abort
    # ("terminate called without an active exception"), as trainers/parallel.py teardown notes
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    # leave without running C++ static destructors: gloo's and DeepSpeed's background threads can still be joinable
    # then and std::terminate the process ("terminate called without an active exception", SIGABRT) after every
    # result is written; os._exit skips that teardown (results are on disk, stdout flushed)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
