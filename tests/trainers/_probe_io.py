"""What a torchrun probe of this folder does last: rank 0 writes its JSON result to argv[1] (run_probe reads it)."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch.distributed as dist


def report(result: Any) -> None:
    """Rank 0 writes `result` as JSON to the path in argv[1]; the ranks meet at a barrier, end the group and leave.

    They leave with os._exit, as tests/launch/ds_init_worker.py does: gloo's C++ teardown at interpreter exit can
    abort a rank ('terminate called without an active exception', SIGABRT) after its work is done, which failed one
    clean-clone CI run of the sequence-parallel probe; the result is on disk and the streams flushed by then."""
    if dist.get_rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f)
    dist.barrier()  # no rank tears its group down while its peer still sends
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
