"""out = x @ W.T on the stored weight type: the prepared Weight, the one plan table that picks a kernel
per (type, T, CPU), and the kernels (fused T=1, register tiles, 16-row repacked, AMX, BLAS)."""
