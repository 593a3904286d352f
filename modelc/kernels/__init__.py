"""modelc.kernels: numba kernels and their numpy references.

Every numba kernel here caches into jit_cache's folder (keyed by version, kernel source and CPU flags),
installed before any kernel module is imported.
"""

from modelc.kernels.runtime import jit_cache

jit_cache.install()
