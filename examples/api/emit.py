"""Write the launch files for the best plan: launch.sh, env.sh, job.json, ds_config.json, README.txt.

Run from anywhere:  python examples/api/emit.py [OUT_DIR]     (default: ./gpuadvisor-launch)
Same as:  gpuadvisor suggest --cluster examples/clusters/dgx-a100-80gb.yaml --model llama-7b --emit OUT_DIR
Then start training with `bash OUT_DIR/launch.sh` on the node (needs `pip install 'gpuadvisor[train]'`).
"""
import sys
from pathlib import Path

import gpuadvisor
from gpuadvisor.launch import emit, make_job

CLUSTER = Path(__file__).resolve().parents[1] / "clusters" / "dgx-a100-80gb.yaml"


def main(out_dir: Path) -> None:
    s = gpuadvisor.suggest("llama-7b", cluster=CLUSTER, seq_len=2048, global_batch=64, top=1)
    if s.launch is None:
        raise SystemExit(f"nothing fits: {s.ranking.fits_nowhere}")
    job = make_job(s.launch.plan, s.workload, steps=20)
    for path in emit(s.launch, job, out_dir):
        print(f"wrote {path}")
    print(f"plan {s.launch.plan.to_string()}; start it with: bash {out_dir}/launch.sh")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("gpuadvisor-launch"))
