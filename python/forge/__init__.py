"""forge: GGUF language models from Python, through forge.h (a thin ctypes binding, nothing reimplemented).

    import forge
    with forge.Model("model.gguf", device="cpu") as model:
        model.plan()["plan"]["total_bytes"]             # the bill before anything is allocated
        for piece in model.generate("The sky is", max_tokens=32):
            print(piece, end="", flush=True)
        states = model.extract("Some text", layers=[0, -1], points=["resid_post", "pattern"], dtype="f32")
        states["blocks.0.hook_resid_post"]               # numpy array [n_tokens, n_embd]
        states["blocks.0.attn.hook_pattern"]             # [n_tokens, heads, keys], rows summing to 1

A plan over the budget raises forge.BudgetError (with required_bytes, budget_bytes, memory_total_bytes,
fits_ctx, fits_kv), a malformed file forge.FormatError; both derive from forge.Error.
"""

from ._errors import BudgetError, Error, FormatError
from ._lib import lib as _native_lib
from ._model import Chunk, Model, bf16_to_f32

for _public in (Model, Chunk, Error, BudgetError, FormatError, bf16_to_f32):
    _public.__module__ = "forge"  # help() and tracebacks name them forge.Model, forge.BudgetError, ...

__all__ = ["Model", "Chunk", "Error", "BudgetError", "FormatError", "bf16_to_f32", "has_gpu", "__version__"]
__version__ = "0.1.0"


def has_gpu() -> bool:
    """True when this build of the package has the GPU backend (FORGE_GPU=nvidia or amd at install)."""
    return bool(_native_lib.forge_py_has_gpu())
