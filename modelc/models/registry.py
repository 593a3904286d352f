"""build_model: the architecture class for a model source (IR Model or Artifact), by its `architecture`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from modelc import architectures
from modelc.errors import UnsupportedError
from modelc.models.bounds import check_counts

if TYPE_CHECKING:
    from modelc.kernels.select import KernelSet


def build_model(source: Any, kernels: KernelSet | None = None):
    """A LlamaModel or Gpt2Model with the source's weights; raises UnsupportedError for other architectures."""
    arch = str(getattr(source, "architecture", "") or "")
    family = architectures.family(arch)
    if family not in architectures.GENERATING:
        supported = ", ".join(architectures.in_families(architectures.GENERATING))
        raise UnsupportedError(f"architecture {arch!r} cannot generate text (supported: {supported})")

    check_counts(source)  # config counts against the tensors present, before anything is allocated from them
    if kernels is None:
        # lazy: numba loads only to build a model
        from modelc.kernels.select import kernel_set

        kernels = kernel_set()
    # lazy: numba kernels load (and compile) only when this path runs
    from modelc.models import r16_cache

    if family == architectures.GPT2:
        from modelc.models.gpt2 import Gpt2Model

        model = Gpt2Model(source, kernels)
    else:
        from modelc.models.llama import LlamaModel

        model = LlamaModel(source, kernels)
    r16_cache.flush()  # the weights it repacked go to the disk cache, in the background
    return model
