"""The model's arithmetic: layer spec and families, parameter and FLOP counts, activation and state
memory, the operations of a layer and their profile keys.

A layer is built from named components (:mod:`.spec`: attention, MLP, norms, extras), each
with its own module: :mod:`.attention` (MHA/GQA, sliding window), :mod:`.mla`, :mod:`.mlp`
(and the registered activations), :mod:`.moe`, :mod:`.mtp`, :mod:`.norms` (post-norms),
:mod:`.softcap`, :mod:`.embedding` (embedding scale), :mod:`.fp8`, :mod:`.tf32` (TF32
matmuls of fp32 plans), :mod:`.context_parallel`, :mod:`.recompute`; :mod:`.layer` is the
dense layer built from them, :mod:`.spec`'s ``ModelFamily`` composes a family's formulas by
its layer spec, :mod:`.families` registers the families (one module each, every module in the
folder imported: a new family, say Gemma, is a module there). Whole-model numbers:
:mod:`.counts` (parameters, FLOPs), :mod:`.memory`, :mod:`.layout` (layers per stage); op
names and keys :mod:`.keys`, kernels :mod:`.kernels`, their times :mod:`.ops`, the ops CUDA
graphs capture :mod:`.cuda_graphs`.
:mod:`.model_math` re-exports the public API for ``from core.model import model_math as mm``.

It imports :mod:`core.plan`, :mod:`core.schedules` and :mod:`core.util`.
"""
