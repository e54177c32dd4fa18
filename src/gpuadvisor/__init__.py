"""gpuadvisor: probe a few GPUs, rank DP/TP/PP/ZeRO plans, confirm with trials, hand over a launch config."""
__version__ = "0.1.0"
