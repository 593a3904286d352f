"""What the kernels run on: the CPU's features and the MODELC_* switches, thread budgets, numba's
cache folder and warm lists, the no-compile guard, huge pages for the weights. Compiles no kernel."""
