"""Built-in model variants; importing this package registers their architectures."""
from . import gemma3  # noqa: F401
from . import llama  # noqa: F401
