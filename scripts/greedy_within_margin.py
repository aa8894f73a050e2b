"""Is TEXT a greedy continuation of PROMPT under this build's logits, up to near ties?

    python scripts/greedy_within_margin.py MODEL PROMPT TEXT [MARGIN]

scripts/test_aarch64.sh runs this on the host with the text the aarch64 build
generated greedily under qemu.  Two builds whose kernels round differently (AVX-512,
AVX2, NEON) pick different tokens where the best two logits are nearly tied (the
8-bit activations move logits by ~0.5), and from there their texts part; comparing
the texts byte for byte then fails for no defect.  So the text is walked token by
token, feeding the host the tokens the other build chose: each must be the host's
best or within MARGIN (default 0.5, tests/test_gemma3.py's rule) of it.  A wrong
kernel gives tokens far below the best, which fails.  Exit 0 when it agrees, 1 (with
the position and the logits) when it does not.
"""
import sys

import numpy as np

import infer


def main() -> int:
    model_path, prompt, text = sys.argv[1:4]
    margin = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
    rest = text.encode("utf-8")
    with infer.load(model_path) as model:
        tok = model.tokenizer
        ids = tok.encode(prompt)
        ctx = model.create_context(n_ctx=len(ids) + len(rest) + 8)
        ctx.prefill(ids)
        step = 0
        while rest:
            logits = np.asarray(ctx.logits, dtype=np.float64)
            best = float(logits.max())
            near = np.flatnonzero(logits >= best - margin)
            # the near-best token the other build wrote: its piece starts what is left
            # (the shell strips trailing newlines from the text, so a last piece may
            # be longer by those)
            fits = [(len(p), int(t)) for t in near for p in [tok.token_to_piece(int(t))]
                    if p and (rest.startswith(p) or p.rstrip(b"\n") == rest)]
            if not fits:
                top = np.argsort(logits)[::-1][:3]
                print(f"step {step}: {rest[:20]!r} starts with no token within {margin} of the best "
                      f"(best: {[(tok.token_to_piece(int(t)), round(float(logits[t]), 3)) for t in top]})")
                return 1
            length, token = max(fits)
            rest = rest[length:]
            ctx.prefill([token])
            step += 1
    print(f"{step} tokens, each the host's best or within {margin} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
