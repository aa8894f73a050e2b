"""A scripted variant: a real Engine/Context whose "forward pass" reads a script.

The context keeps a KV "cache" (the token id written at each position) and
computes its logits from that cache alone, so a turn that forgot to roll back or
re-prefill would read the wrong history and go off script.  The model's rule:
the k-th assistant turn (k = how many assistant openers the cache holds) is
``script[k]``; once the cache holds all of it, or holds anything else after the
opener, the model ends its turn.

The tokenizer is byte-level with special tokens and a few multi-byte words
(longest match first), so texts can be tokenized more than one way, as with BPE.
"""
from __future__ import annotations

import codecs
import re
from typing import Optional, Sequence, Union

import numpy as np

from infer.chat import Chat
from infer.runtime import Context, Engine, Model

CHATML_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                   "<tool_call>", "</tool_call>")
WORDS = ("Hello", " world", "ab", "assistant", "user")


class ScriptedVocab:
    def __init__(self, specials: Sequence[str], words: Sequence[str], bos: Optional[str],
                 eos: str, end_of_turn: Sequence[str]) -> None:
        self.pieces: list[bytes] = [bytes([b]) for b in range(256)]
        self.special_ids: dict[str, int] = {}
        for s in specials:
            self.special_ids[s] = len(self.pieces)
            self.pieces.append(s.encode())
        self.word_ids: dict[bytes, int] = {}
        for w in words:
            self.word_ids[w.encode()] = len(self.pieces)
            self.pieces.append(w.encode())
        self.n_vocab = len(self.pieces)
        self.bos_token_id = self.special_ids[bos] if bos else None
        self.eos_token_id = self.special_ids[eos]
        self.end_of_turn_ids = frozenset(self.special_ids[t] for t in end_of_turn)

    def __len__(self) -> int:
        return self.n_vocab

    def is_special(self, token: int) -> bool:
        return token in self.special_ids.values()

    def token_id(self, text: str) -> Optional[int]:
        if text in self.special_ids:
            return self.special_ids[text]
        raw = text.encode()
        if raw in self.word_ids:
            return self.word_ids[raw]
        return raw[0] if len(raw) == 1 else None


class _StreamDecoder:
    def __init__(self, vocab: ScriptedVocab, skip_special: bool = False) -> None:
        self.vocab = vocab
        self.skip_special = skip_special
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token: int) -> str:
        if self.skip_special and self.vocab.is_special(token):
            return ""
        return self.utf8.decode(self.vocab.pieces[token])

    def flush(self) -> str:
        text = self.utf8.decode(b"", final=True)
        self.utf8.reset()
        return text


class ScriptedTokenizer:
    def __init__(self, specials: Sequence[str] = CHATML_SPECIALS, words: Sequence[str] = WORDS,
                 bos: Optional[str] = None, eos: str = "<|im_end|>",
                 end_of_turn: Sequence[str] = ("<|im_end|>", "<|endoftext|>"), add_bos: bool = False) -> None:
        self.vocab = ScriptedVocab(specials, words, bos, eos, end_of_turn)
        self.add_bos = add_bos
        longest_first = sorted(specials, key=len, reverse=True)
        self._special_re = re.compile("(" + "|".join(re.escape(s) for s in longest_first) + ")")
        self._words = sorted(self.vocab.word_ids.items(), key=lambda kv: -len(kv[0]))

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        ids = [self.vocab.bos_token_id] if add_special and self.add_bos else []
        parts = self._special_re.split(text) if parse_special else [text]
        for i, part in enumerate(parts):
            if parse_special and i % 2 == 1:
                ids.append(self.vocab.special_ids[part])
                continue
            raw = part.encode()
            at = 0
            while at < len(raw):
                for word, tid in self._words:
                    if raw.startswith(word, at):
                        ids.append(tid)
                        at += len(word)
                        break
                else:
                    ids.append(raw[at])
                    at += 1
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        specials = set(self.vocab.special_ids.values())
        return b"".join(self.vocab.pieces[i] for i in ids
                        if not (skip_special and i in specials)).decode("utf-8", "replace")

    def stream_decoder(self, skip_special: bool = False) -> _StreamDecoder:
        return _StreamDecoder(self.vocab, skip_special)


class GreedySampler:
    """argmax, with the Sampler's four methods, so a test needs only the variant."""

    def __init__(self) -> None:
        self.history: list[int] = []

    def sample(self, logits: np.ndarray) -> int:
        return int(np.argmax(logits))

    def accept(self, token: int) -> None:
        self.history.append(int(token))

    def reset(self) -> None:
        self.history = []

    def set_history(self, tokens: Sequence[int]) -> None:
        self.history = list(tokens)


class RaisingSampler(GreedySampler):
    """Greedy, but its ``at``-th sample raises ``exc`` (Ctrl-C, a failing kernel...)."""

    def __init__(self, at: int, exc: BaseException) -> None:
        super().__init__()
        self.calls, self.at, self.exc = 0, at, exc

    def sample(self, logits: np.ndarray) -> int:
        self.calls += 1
        if self.calls == self.at:
            raise self.exc
        return super().sample(logits)


Script = Sequence[Union[str, Sequence[int]]]


class ScriptedEngine(Engine):
    architecture = "scripted"

    def __init__(self, tokenizer: ScriptedTokenizer, script: Script, opener: str,
                 end_token: str = "<|im_end|>", max_seq_len: int = 2048) -> None:
        self.tokenizer = tokenizer
        self.vocab_size = len(tokenizer.vocab)
        self.max_seq_len = max_seq_len
        self.opener = tokenizer.encode(opener, add_special=False, parse_special=True)
        self.end_id = tokenizer.vocab.token_id(end_token)
        self.replies = [list(r) if not isinstance(r, str) else
                        tokenizer.encode(r, add_special=False, parse_special=True) for r in script]

    def create_context(self, n_ctx: Optional[int] = None, sampler=None) -> "ScriptedContext":
        return ScriptedContext(self, n_ctx or self.max_seq_len, sampler or GreedySampler())

    def next_token(self, seq: np.ndarray) -> int:
        seq = [int(t) for t in seq]
        n = len(self.opener)
        starts = [i for i in range(len(seq) - n + 1) if seq[i:i + n] == self.opener]
        if not starts or len(starts) > len(self.replies):
            return self.end_id
        reply = self.replies[len(starts) - 1]
        done = seq[starts[-1] + n:]
        if len(done) < len(reply) and reply[:len(done)] == done:
            return reply[len(done)]
        return self.end_id


class ScriptedContext(Context):
    def __init__(self, engine: ScriptedEngine, n_ctx: int, sampler) -> None:
        super().__init__(engine, n_ctx, sampler)
        self.cache = np.full(n_ctx, -1, dtype=np.int64)
        self.n_cached = 0
        #: (start, n_tokens) of every forward pass, prefill or decode
        self.forward_calls: list[tuple[int, int]] = []

    def _forward(self, tokens: np.ndarray, start: int) -> None:
        assert start == self.n_cached, "forward past stale cache positions"
        self.cache[start:start + len(tokens)] = tokens
        self.n_cached = start + len(tokens)
        self.forward_calls.append((start, len(tokens)))
        self.logits[:] = 0.0
        self.logits[self.engine.next_token(self.cache[:self.n_cached])] = 1.0

    def _truncate_cache(self, n: int) -> None:
        self.cache[n:] = -1
        self.n_cached = min(self.n_cached, n)

    @property
    def forwarded(self) -> int:
        return sum(n for _, n in self.forward_calls)


CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")


def scripted_model(script: Script, template: Optional[str] = CHATML, tokenizer=None,
                   opener: str = "<|im_start|>assistant\n", end_token: str = "<|im_end|>",
                   max_seq_len: int = 2048, metadata: Optional[dict] = None) -> Model:
    """A Model whose engine follows ``script``; its chat is built the way `infer.load`
    builds one, from the file's metadata (``template``, or ``metadata`` itself) and
    the vocabulary.  ``tokenizer`` may be a real one (`infer.tokenizer.Tokenizer`)."""
    tokenizer = tokenizer or ScriptedTokenizer()
    engine = ScriptedEngine(tokenizer, script, opener, end_token, max_seq_len)
    if metadata is None:
        metadata = {"tokenizer.chat_template": template} if template is not None else {}
    chat = Chat.from_metadata(metadata, tokenizer)
    return Model(tokenizer, engine, chat)
