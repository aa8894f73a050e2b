"""The perplexity of a text by the float64 reference passes, llama-perplexity's method.

    python tests/reference/exact_perplexity.py smollm2|gemma3 [FILE] [N_CTX]

The same quantized weights as the engines, no activation rounding (numpy_llama.py,
numpy_gemma3.py); the method of llama-perplexity: the text tokenized once (BOS where
the model adds one), len // N_CTX chunks with BOS in place of their first token, the
second half of each scored.  tests/test_perplexity.py holds its GPL-3 figures (ctx 512),
which no engine's rounding touches.  Minutes per model (one BLAS thread).
"""
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]   # tests/ (`reference`), the checkout (`infer`)

from reference.numpy_gemma3 import NumpyGemma3, single_threaded_blas  # noqa: E402
from reference.numpy_llama import shared  # noqa: E402


def exact_perplexity(name: str, text: str, n_ctx: int = 512) -> float:
    import infer
    from infer.gguf import default_model_path, gemma3_model_path

    path = str(gemma3_model_path() if name == "gemma3" else default_model_path())
    with infer.load(path) as model:   # its tokenizer only (tests check it against llama-tokenize)
        vocab = model.tokenizer.vocab
        tokens = np.asarray(model.tokenizer.encode(text, add_special=True, parse_special=False))
        bos = vocab.bos_token_id if vocab.add_bos else None
    if name == "gemma3":
        ref = NumpyGemma3(path)

        def logits(ids, first):
            return ref.head(ref.hidden(ids)[first:])
    else:
        ref = shared(path)

        def logits(ids, first):
            return np.asarray(ref.forward(list(ids)), np.float64)[first:]
    first, total, count = n_ctx // 2, 0.0, 0
    for c in range(len(tokens) // n_ctx):
        chunk = tokens[c * n_ctx:(c + 1) * n_ctx]
        ids = chunk[:-1].copy()
        if bos is not None:
            ids[0] = bos
        with single_threaded_blas():
            z = logits(ids, first)
        top = z.max(axis=1, keepdims=True)
        nll = top[:, 0] + np.log(np.exp(z - top).sum(axis=1)) - z[np.arange(len(z)), chunk[first + 1:]]
        total, count = total + float(nll.sum()), count + len(nll)
        print(f"[{c + 1}]{np.exp(total / count):.4f}", end=",", flush=True)
    print()
    return float(np.exp(total / count))


if __name__ == "__main__":
    text_path = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/common-licenses/GPL-3"
    n_ctx = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    print(f"exact PPL = {exact_perplexity(sys.argv[1], open(text_path).read(), n_ctx):.4f}")
