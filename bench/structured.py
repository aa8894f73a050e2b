"""Constrained decoding cost: a masked decode step against an unmasked one, on SmolLM2.

    python bench/structured.py

Both runs decode greedily from the same chat prompt; the masked one under a JSON
Schema whose one long string keeps the grammar busy for every step.  Rounds of
INFER_BENCH_STEPS steps alternate between the two (so load on the machine hits
both alike); the figure is the median step time over all rounds.  The grammar's
next mask is computed on a worker thread during the forward pass; "mask alone"
times that computation on the critical path instead (background=False), to show
what the overlap hides.  Goal: masked / unmasked < 1.10.
"""
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import infer  # noqa: E402
from infer.sampler import Sampler  # noqa: E402
from infer.structured import Constraint, Grammar  # noqa: E402

STEPS = int(os.environ.get("INFER_BENCH_STEPS", "32"))
ROUNDS = int(os.environ.get("INFER_BENCH_ROUNDS", "4"))
SCHEMA = {"type": "object", "properties": {"story": {"type": "string", "maxLength": 4000}},
          "required": ["story"], "additionalProperties": False}


def step_times(model, prompt, constraint):
    ctx = model.create_context(n_ctx=len(prompt) + STEPS + 8, sampler=Sampler(temperature=0.0, grammar=constraint))
    ctx.prefill(prompt)
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        ctx.next()
        times.append(time.perf_counter() - t0)
    return times


def main():
    with infer.load() as model:
        rendered = model.chat.render([{"role": "user", "content": "Write a long story as JSON."}],
                                     add_generation_prompt=True)
        prompt = model.tokenizer.encode(rendered, add_special=False, parse_special=True)
        grammar = Grammar.json_schema(SCHEMA)
        n = model.engine.vocab_size
        Constraint(grammar, model.tokenizer, n_vocab=n)  # builds llguidance's tokenizer once
        runs = {"unmasked": [], "masked (mask in background)": [], "masked (mask on the critical path)": []}
        for _ in range(ROUNDS):
            runs["unmasked"] += step_times(model, prompt, None)
            runs["masked (mask in background)"] += step_times(
                model, prompt, Constraint(grammar, model.tokenizer, n_vocab=n))
            runs["masked (mask on the critical path)"] += step_times(
                model, prompt, Constraint(grammar, model.tokenizer, n_vocab=n, background=False))
        base = statistics.median(runs["unmasked"])
        print(f"SmolLM2-135M, vocabulary {n}, {ROUNDS} rounds x {STEPS} greedy steps, median per step")
        print(f"{'run':40s} {'ms/step':>8s} {'ratio':>7s}")
        for name, times in runs.items():
            med = statistics.median(times)
            print(f"{name:40s} {med * 1e3:8.2f} {med / base:7.3f}")


if __name__ == "__main__":
    main()
