"""decode_layer._chain's picks: one machine-code name per chain of kinds.

numba names a jitted function's code after its __qualname__, a per-process counter and its argument types, and
links it weakly into each cached caller. Every chain's pick takes the same argument types, so two processes that
compiled different chains at the same counter value (a cold start's helpers, test workers) wrote cached entries
whose picks shared one symbol, and a process that loaded both ran one chain's pick for the other: a wrong
kernel, or the "does not name" error of _not_in_kinds (seen on a shared kernel cache in tests/models/
test_decode_layer.py). A name per chain takes the counter out of it; these checks fail without it."""

import itertools

from modelc.kernels.layer import decode_layer
from modelc.kernels.matmul import gemm_r16

NAMES = ("k", *(f"r16_{k}" for k in sorted(gemm_r16.KERNEL_OF_KIND)))


def _chains():
    for n in range(1, 4):
        yield from itertools.permutations(NAMES, n)


def test_every_chain_and_every_link_of_it_has_its_own_name():
    seen: dict[str, tuple[str, ...]] = {}
    for names in _chains():
        for i in range(len(names)):  # the chain and every rest it calls
            link = names[i:]
            qualname = decode_layer._chain(link).py_func.__qualname__
            assert seen.setdefault(qualname, link) == link, (qualname, seen[qualname], link)


def test_the_name_is_the_same_in_every_process():
    """The name must not depend on what else a process compiled (only the kinds): equal chains in two processes
    then name equal code."""
    assert decode_layer._chain(("r16_1", "k")).py_func.__qualname__ == "_chain.<locals>.pick_r16_1_k"


def test_a_pick_is_local_to_a_function_by_its_qualname():
    """warm_list.snapshot() skips dispatchers local to a function (compiled only into their callers) by the
    "<locals>" in their qualname, and returns None (no warm list: a restart replays nothing) for any other it
    cannot find by module and name. tests/models/test_decode_layer.py checks snapshot() after real decode steps."""
    for names in _chains():
        assert "<locals>" in decode_layer._chain(names).py_func.__qualname__
