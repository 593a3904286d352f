"""The numpy twins of the kernels: same names and signatures, written to be obviously right, no numba.
`MODELC_KERNELS=ref` runs models on them."""
