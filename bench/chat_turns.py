"""Chat turns with KV reuse against re-prefilling the whole conversation.

Runs the same greedy conversation twice in one process: through ChatSession
(each turn prefills only its new tokens) and as a fresh context per turn
(the whole rendered conversation prefilled, as a stateless server would).

    PYTHONPATH=. python bench/chat_turns.py     # INFER_BENCH_TURNS=4 INFER_BENCH_MAX_TOKENS=32
"""
import os
import time

import infer
from infer.chat import ChatSession

QUESTIONS = ["What is the capital of France?", "What is it famous for?", "Name a museum there.",
             "And a famous dish?", "Thank you, goodbye!"]


def main() -> None:
    turns = int(os.environ.get("INFER_BENCH_TURNS", "4"))
    max_tokens = int(os.environ.get("INFER_BENCH_MAX_TOKENS", "32"))
    with infer.load() as model:
        session = ChatSession(model, temperature=0, max_tokens=max_tokens, n_ctx=2048)
        print(f"{'turn':>4} {'prompt':>7} {'prefilled':>9} {'reuse s':>8} {'fresh s':>8} {'fresh/reuse':>11}")
        for i, question in enumerate(QUESTIONS[:turns]):
            messages = session.history + [{"role": "user", "content": question}]
            t0 = time.perf_counter()
            reply = session.send(question)
            reuse = time.perf_counter() - t0

            prompt = model.tokenizer.encode(model.chat.render(messages), add_special=False, parse_special=True)
            t0 = time.perf_counter()
            fresh = model.create_context(n_ctx=2048, temperature=0)
            fresh.prefill(prompt)
            for _ in range(reply.completion_tokens):
                fresh.next()
            fresh_s = time.perf_counter() - t0
            print(f"{i + 1:>4} {reply.prompt_tokens:>7} {reply.prefilled_tokens:>9} {reuse:>8.3f} "
                  f"{fresh_s:>8.3f} {fresh_s / reuse:>11.2f}")


if __name__ == "__main__":
    main()
