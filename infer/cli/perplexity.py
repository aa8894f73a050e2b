"""`infer perplexity FILE`: llama-perplexity's measurement (see infer/perplexity.py).

Prints the running estimate after each chunk (``[1]18.2301,[2]...``) and
``Final estimate: PPL = x +/- y``; a progress bar on stderr when it is a terminal.
``--kl-divergence-base OUT`` also saves the logits (llama-perplexity's file format);
``--kl-divergence BASE`` compares against such a file instead.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from .common import CLIError, UsageError, add_model_args, load_model


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as e:
        raise CLIError(f"{path}: {e.strerror}") from None


def cmd_perplexity(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from .. import perplexity as P

    if args.kl_divergence and args.kl_divergence_base:
        raise UsageError("--kl-divergence and --kl-divergence-base: one or the other")
    if args.chunks == 0:  # no tokens scored: the estimate would be nan +/- nan
        raise UsageError("--chunks: must be >= 1, or -1 for all of them, got 0")
    text = "" if args.kl_divergence else _read_text(args.file)
    n_ctx = args.ctx_size
    t0 = time.perf_counter()
    with load_model(args) as model:
        if args.kl_divergence:
            return _kl_divergence(args, model, P, tqdm, t0)
        tokens = P.tokenize_for_perplexity(model, text)
        try:
            n_chunk = P.chunk_count(len(tokens), n_ctx, args.chunks)
        except ValueError as e:
            raise CLIError(str(e)) from None
        print(f"perplexity: {len(tokens)} tokens, {n_chunk} chunks of {n_ctx}", file=sys.stderr)
        writer = None
        if args.kl_divergence_base:
            writer = P.LogitsWriter(args.kl_divergence_base, n_ctx, model.engine.vocab_size, n_chunk,
                                    np.asarray(tokens))
        vocab = model.tokenizer.vocab
        bos = vocab.bos_token_id if vocab.add_bos else None
        est = P.Estimate()
        first = n_ctx // 2
        ok = False
        arr = np.asarray(tokens, dtype=np.int64)
        chunks = [arr[i * n_ctx:(i + 1) * n_ctx] for i in range(n_chunk)]
        scored = P.scored_chunks(model, iter(chunks), n_ctx, bos, args.batch_size)
        try:
            for i, (chunk, logits) in enumerate(tqdm(zip(chunks, scored), total=n_chunk, desc="chunks",
                                                     unit="chunk", file=sys.stderr, disable=None, leave=False)):
                est.add(P.nll_of(logits, chunk[first + 1:]))
                if writer is not None:
                    writer.add(logits)
                print(f"[{i + 1}]{est.ppl:.4f},", end="", flush=True)
            ok = True
        finally:
            if writer is not None:
                writer.close(ok)
        print()
        print(f"Final estimate: PPL = {est.ppl:.4f} +/- {est.uncertainty:.5f}")
        print(f"[{est.count} tokens scored in {time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    return 0


def _kl_divergence(args: argparse.Namespace, model: Any, P: Any, tqdm: Any, t0: float) -> int:
    try:
        base = P.LogitsReader(args.kl_divergence, model.engine.vocab_size)
    except OSError as e:
        raise CLIError(f"{args.kl_divergence}: {e.strerror}") from None
    except P.LogitsFileError as e:
        raise CLIError(str(e)) from None
    try:
        n_ctx = base.n_ctx
        n_chunk = base.n_chunk if args.chunks is None or args.chunks < 0 else min(args.chunks, base.n_chunk)
        vocab = model.tokenizer.vocab
        bos = vocab.bos_token_id if vocab.add_bos else None
        first = n_ctx // 2
        kld = P.KLDivergence()
        print("chunk        PPL          ln(PPL(Q)/PPL(base))    KL Divergence    Same top p")
        chunks = [base.tokens[i * n_ctx:(i + 1) * n_ctx] for i in range(n_chunk)]
        scored = P.scored_chunks(model, iter(chunks), n_ctx, bos, args.batch_size)
        for i, (chunk, logits) in enumerate(tqdm(zip(chunks, scored), total=n_chunk, desc="chunks",
                                                 unit="chunk", file=sys.stderr, disable=None, leave=False)):
            try:
                rows = base.chunk(i)
            except P.LogitsFileError as e:
                raise CLIError(str(e)) from None
            kld.add(logits, rows, chunk[first + 1:])
            s = kld.summary()
            print(f"{i + 1:4d}    {s['ppl']:10.4f}    {s['ln_ppl_ratio']:12.5f}    {s['kld_mean']:12.5f}"
                  f"    {100 * s['same_top']:7.3f} %")
    finally:
        base.close()
    s = kld.summary()
    print("====== KL divergence statistics ======")
    print(f"Mean PPL(Q)                   : {s['ppl']:10.6f}")
    print(f"Mean PPL(base)                : {s['ppl_base']:10.6f}")
    print(f"Mean ln(PPL(Q)/PPL(base))     : {s['ln_ppl_ratio']:10.6f}")
    print(f"Mean    KLD: {s['kld_mean']:10.6f} +/- {s['kld_stderr']:10.6f}")
    print(f"Maximum KLD: {s['kld_max']:10.6f}")
    print(f"Median  KLD: {s['kld_median']:10.6f}")
    print(f"RMS Δp     : {100 * s['rms_dp']:6.3f} %")
    print(f"Same top p : {100 * s['same_top']:6.3f} %")
    print(f"[{time.perf_counter() - t0:.1f} s]", file=sys.stderr)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("perplexity", help="perplexity of a text file, as llama-perplexity measures it")
    p.add_argument("file", nargs="?", default=None, help="text file (not needed with --kl-divergence)")
    p.add_argument("--file", "-f", dest="file_option", metavar="FILE", default=None,
                   help="the text file, as llama-perplexity's -f takes it")
    p.add_argument("--ctx-size", "-c", type=int, default=512, help="tokens per chunk (default 512)")
    p.add_argument("--chunks", type=int, default=None, help="score at most this many chunks; -1 = all (default: all)")
    p.add_argument("--batch-size", "-b", type=int, default=2048,
                   help="tokens per pass: batch-size / ctx-size chunks are evaluated together, fewer "
                        "where their logits would pass 512 MiB (default 2048, as llama-perplexity)")
    p.add_argument("--kl-divergence-base", metavar="OUT", default=None,
                   help="also save the logits to OUT (llama-perplexity's format)")
    p.add_argument("--kl-divergence", metavar="BASE", default=None,
                   help="compare against the logits saved in BASE (KL divergence, same-top rate)")
    add_model_args(p)
    p.set_defaults(func=_checked)


def _checked(args: argparse.Namespace) -> int:
    if args.file_option is not None:
        if args.file is not None and args.file != args.file_option:
            raise UsageError(f"perplexity: two text files given ({args.file}, -f {args.file_option})")
        args.file = args.file_option
    if args.file is None and not args.kl_divergence:
        raise UsageError("perplexity: give a text FILE (or --kl-divergence BASE)")
    if args.ctx_size < 4:
        raise UsageError(f"--ctx-size: must be >= 4, got {args.ctx_size}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size: must be >= 1, got {args.batch_size}")
    return cmd_perplexity(args)
