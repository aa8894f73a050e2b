"""Built-in model variants; importing this package registers their architectures."""
from . import llama  # noqa: F401
