"""The small per-token kernels around the matmuls: RMSNorm/LayerNorm, RoPE, activations, erf/GELU."""
