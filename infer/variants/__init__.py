"""Built-in model variants; importing this package registers their architectures."""
from . import ernie4_5  # noqa: F401
from . import exaone  # noqa: F401
from . import exaone4  # noqa: F401
from . import gemma  # noqa: F401
from . import gemma2  # noqa: F401
from . import gemma3  # noqa: F401
from . import granite  # noqa: F401
from . import hunyuan_dense  # noqa: F401
from . import lfm2  # noqa: F401
from . import llama  # noqa: F401
from . import olmo2  # noqa: F401
from . import phi3  # noqa: F401
from . import qwen2  # noqa: F401
from . import qwen3  # noqa: F401
from . import smollm3  # noqa: F401
