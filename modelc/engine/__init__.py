"""The runtime: runner (BatchPlan -> forward -> sampled tokens), sampler, LoRA, constraints, Python API."""
