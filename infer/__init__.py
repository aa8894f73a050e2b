"""infer: LLM inference for Python on hand-written SIMD kernels.

    import infer
    with infer.load() as model:                       # SmolLM2-135M-Instruct by default
        for piece in infer.generate(model, "The capital of France is", max_tokens=32):
            print(piece, end="", flush=True)
"""
__version__ = "0.1.0"

from typing import TYPE_CHECKING

from . import _source_tree  # noqa: F401  (first: ImportError saying what to do if unbuilt)

from .generate import Generation, generate
from .loader import load
from .runtime import (
    Context,
    ContextBusyError,
    ContextOverflowError,
    Engine,
    Model,
    ModelClosedError,
    UnsupportedModelError,
    known_architectures,
    register_variant,
)

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__ below
    from .chat import ChatSession
    from .sampler import Sampler

__all__ = [
    "__version__", "load", "generate", "Generation", "Model", "Engine", "Context",
    "ContextOverflowError", "ContextBusyError", "ModelClosedError", "UnsupportedModelError",
    "Sampler", "register_variant", "known_architectures", "ChatSession",
]


def __getattr__(name: str) -> object:
    # Imported on first use, so `import infer` stays light for the CLI's first token.
    if name == "Sampler":
        from .sampler import Sampler

        return Sampler
    if name == "ChatSession":  # jinja2 is imported only by those who chat
        from .chat import ChatSession

        return ChatSession
    raise AttributeError(f"module 'infer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
