"""`python -m gpuadvisor.trainers --plan job.json [--steps N] [--warmup W] --out DIR`."""
import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
