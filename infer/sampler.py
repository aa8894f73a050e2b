"""Token sampling: llama.cpp's default chain, seeded and reproducible.

The chain, in order (llama.cpp's ``common_sampler`` default with the samplers
that are off by default left out):

1. **logit bias** (llama.cpp prepends it when biases are given): ``logit += bias``;
   a bias of ``-inf`` bans a token.
2. **penalties** over the window of the last ``repeat_last_n`` accepted tokens:
   a token seen ``c > 0`` times has its logit divided by ``repeat_penalty`` if
   positive, multiplied if not (once, whatever ``c``), then
   ``logit -= c * frequency_penalty + presence_penalty``.
2b. **grammar** (``Sampler.grammar``, an `infer.structured.Constraint`): tokens the
   grammar does not allow next get ``-inf``.  `logprobs` reports the log-softmax of
   the logits at this point (after bias, penalties and grammar), as llama-server
   documents its ``n_probs``.
3. **top-k**: keep the ``top_k`` largest logits (``top_k <= 0``: off).  Ties at
   the boundary keep the lower ids.
4. **top-p**: softmax over what is left, keep the shortest run of most probable
   tokens whose probabilities add up to ``>= top_p`` (the one that crosses
   included; ``top_p == 1``: off; ``0``: the most probable token alone, as llama.cpp
   keeps at least one and OpenAI's API takes 0).
5. **min-p**: keep tokens with ``p >= min_p * p_max``, i.e.
   ``logit >= max_logit + ln(min_p)`` (``min_p == 0``: off).
6. **temperature**: ``logit /= temperature``.  ``temperature <= 0`` (or 0 in
   float32: below 1.4e-45) is greedy:
   the largest logit after steps 1-2 (lowest id on ties), no random draw.
   ``top_k == 1`` is greedy too.
7. **draw**: softmax over the survivors, then one uniform draw ``u`` in [0, 1)
   from ``numpy.random.Generator(PCG64(seed))``; the token is the first
   survivor whose cumulative probability exceeds ``u``, taking the survivors in
   order of decreasing logit (ties: lower id first) when top-k or top-p ran, in
   id order otherwise (so that no stage needs a full sort).  Weights are
   ``exp((logit - max) / temperature)`` in float32, summed in float64.  PCG64 and this rule are specified, so
   the same seed, logits and history give the same token on every machine.

What feeds the penalty window: ``Context.prefill`` accepts every *prompt* token,
as the llama.cpp command line does (llama-cpp-python only counts generated
tokens), and ``Context.next`` accepts each generated one.
"""
from __future__ import annotations

import math
import secrets
from collections import deque
from typing import Any, Iterable, Mapping, NamedTuple, Optional

import numpy as np
from numpy.typing import NDArray

__all__ = ["Sampler"]


def _check_number(name: str, value: object, lo: float = -math.inf, hi: float = math.inf,
                  lo_open: bool = False, hi_open: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name}: expected a number, got {type(value).__name__}")
    number = float(value)
    if math.isnan(number):
        raise ValueError(f"{name}: must not be NaN")
    if number < lo or (lo_open and number == lo) or number > hi or (hi_open and number == hi):
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise ValueError(f"{name}: must be in {left}{lo}, {hi}{right}, got {number}")
    return number


#: temperatures below this are 0 in float32 (dividing by them gave NaN weights): greedy,
#: as in llama.cpp, whose float parameter holds them as 0
_GREEDY_BELOW = float(np.finfo(np.float32).smallest_subnormal)

#: at most this many logit_bias entries take the scalar greedy path
_SCALAR_BIAS_MAX = 8


def _check_int(name: str, value: object, lo: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {type(value).__name__}")
    number = int(value)
    if lo is not None and number < lo:
        raise ValueError(f"{name}: must be >= {lo}, got {number}")
    return number


class TokenLogprob(NamedTuple):
    """A chosen token's log-probability and the most likely alternatives."""

    token: int
    logprob: float
    #: (token id, logprob), most likely first (ties: lower id first)
    top: list[tuple[int, float]]


class Sampler:
    """Picks the next token from a logits vector; see the module doc for the chain.

    ``seed=None`` draws a fresh seed from the OS (again at every ``reset``, as
    llama.cpp does for its default seed); an int makes the draws reproducible.
    """

    def __init__(self, temperature: float = 0.8, top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 logit_bias: Optional[Mapping[int, float]] = None,
                 seed: Optional[int] = None, grammar: Any = None) -> None:
        self.temperature = _check_number("temperature", temperature, lo=0.0)
        self.top_k = _check_int("top_k", top_k)
        self.top_p = _check_number("top_p", top_p, lo=0.0, hi=1.0)
        self.min_p = _check_number("min_p", min_p, lo=0.0, hi=1.0)
        self.repeat_penalty = _check_number("repeat_penalty", repeat_penalty, lo=0.0,
                                            lo_open=True, hi_open=True)
        self.repeat_last_n = _check_int("repeat_last_n", repeat_last_n, lo=0)
        self.frequency_penalty = _check_number("frequency_penalty", frequency_penalty,
                                               hi_open=True, lo_open=True)
        self.presence_penalty = _check_number("presence_penalty", presence_penalty,
                                              hi_open=True, lo_open=True)
        bias: dict[int, float] = {}
        if logit_bias is not None:
            if not isinstance(logit_bias, Mapping):
                raise TypeError(f"logit_bias: expected a mapping token -> bias, "
                                f"got {type(logit_bias).__name__}")
            for tok, b in logit_bias.items():
                tok = _check_int("logit_bias token", tok, lo=0)
                if isinstance(b, bool) or not isinstance(b, (int, float, np.integer, np.floating)):
                    raise TypeError(f"logit_bias[{tok}]: expected a number, got {type(b).__name__}")
                b = float(b)
                if math.isnan(b) or b == math.inf:
                    raise ValueError(f"logit_bias[{tok}]: must be finite or -inf, got {b}")
                bias[tok] = b
        self.logit_bias = bias
        if bias:
            self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
            self._bias_values = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
            # A few biased ids (a server's banned end-of-turn tokens) are cheaper as scalars
            # than as numpy calls on tiny arrays, once per token and slot.
            self._bias_pairs = (list(zip(bias.keys(), self._bias_values))
                                if len(bias) <= _SCALAR_BIAS_MAX else None)
        if seed is not None:
            seed = _check_int("seed", seed, lo=0)
        self._seed_arg = seed
        self.seed: int = 0
        self._rng: np.random.Generator
        self._window: deque[int] = deque()
        self._buf = np.empty(0, dtype=np.float32)
        self._counts: dict[int, int] = {}
        #: an infer.structured.Constraint masking the tokens its grammar forbids, or None
        self.grammar = grammar
        self.reset()

    # ---- state ------------------------------------------------------------------
    def reset(self) -> None:
        """Clear the penalty window and re-seed the RNG (with the original seed)."""
        self.seed = self._seed_arg if self._seed_arg is not None else secrets.randbits(63)
        self._rng = np.random.Generator(np.random.PCG64(self.seed))
        self._window.clear()
        self._counts.clear()
        if self.grammar is not None:
            self.grammar.reset()

    def get_rng_state(self) -> dict[str, Any]:
        """The RNG's position; `set_rng_state` goes back to it (a draw taken back)."""
        return dict(self._rng.bit_generator.state)

    def set_rng_state(self, state: Mapping[str, Any]) -> None:
        self._rng.bit_generator.state = dict(state)

    def commit(self, token: int) -> None:
        """``token``, chosen by `sample`, is being appended to the output: the grammar
        (if any) moves past it and starts computing its next mask."""
        if self.grammar is not None:
            self.grammar.consume(token)

    def uncommit(self, n: int = 1) -> None:
        """Undo the last ``n`` `commit` calls (a failed decode, a truncation)."""
        if self.grammar is not None:
            self.grammar.rollback(n)

    def accept(self, token: int) -> None:
        """Push ``token`` into the penalty window (dropping the oldest when full)."""
        token = _check_int("token", token, lo=0)
        n = self.repeat_last_n
        if n == 0:
            return
        window, counts = self._window, self._counts
        if len(window) == n:
            old = window.popleft()
            c = counts[old] - 1
            if c:
                counts[old] = c
            else:
                del counts[old]
        window.append(token)
        counts[token] = counts.get(token, 0) + 1

    def set_history(self, tokens: Iterable[int]) -> None:
        """Refill the window from the tail of ``tokens``; the RNG is left as it is."""
        tokens = list(tokens)
        self._window.clear()
        self._counts.clear()
        if self.repeat_last_n:
            for t in tokens[-self.repeat_last_n:]:
                self.accept(t)

    def get_state(self) -> dict[str, Any]:
        """Everything the next draws depend on, as JSON-able values (`from_state`
        rebuilds it): settings, seeds, the RNG's position, the penalty window.
        A grammar is not part of it."""
        return {
            "settings": dict(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                             min_p=self.min_p, repeat_penalty=self.repeat_penalty,
                             repeat_last_n=self.repeat_last_n, frequency_penalty=self.frequency_penalty,
                             presence_penalty=self.presence_penalty, seed=self._seed_arg),
            "logit_bias": [[t, "-inf" if b == -math.inf else b] for t, b in self.logit_bias.items()],
            "seed": self.seed,
            "rng": self._rng.bit_generator.state,
            "window": list(self._window),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "Sampler":
        bias = {int(t): -math.inf if b == "-inf" else float(b) for t, b in state["logit_bias"]}
        s = cls(**state["settings"], logit_bias=bias or None)
        s.seed = _check_int("seed", state["seed"], lo=0)
        s._rng = np.random.Generator(np.random.PCG64())
        s._rng.bit_generator.state = dict(state["rng"])
        for t in state["window"]:
            s.accept(int(t))
        return s

    @property
    def history(self) -> list[int]:
        """The tokens in the penalty window, oldest first."""
        return list(self._window)

    # ---- sampling ---------------------------------------------------------------
    def sample(self, logits: NDArray[Any]) -> int:
        """The next token for ``logits`` (not modified)."""
        ids, w = self._candidates(logits)
        if ids is None:  # every token survived, in id order
            return _draw(w, self._rng.random())
        if ids.shape[0] == 1:
            return int(ids[0])  # greedy or one survivor: no random draw
        return int(ids[_draw(w, self._rng.random())])

    def adjusted(self, logits: NDArray[Any]) -> NDArray[Any]:
        """The logits after bias, penalties and grammar: what top-k and the rest see
        (``logits`` itself when none of them applies)."""
        x, _ = self._check_logits(logits)
        return self._apply_bias_and_penalties(x, x.shape[0])

    def logprobs(self, logits: NDArray[Any], token: int, top: int = 0) -> "TokenLogprob":
        """Log-probability of ``token`` and of the ``top`` most likely tokens under the
        log-softmax of `adjusted` logits (call it before `accept`/`commit` of ``token``)."""
        token = _check_int("token", token, lo=0)
        top = _check_int("top", top, lo=0)
        x = self.adjusted(logits).astype(np.float64)
        if token >= x.shape[0]:
            raise ValueError(f"token: {token} is outside the vocabulary [0, {x.shape[0]})")
        m = float(x.max())
        lse = m + math.log(float(np.exp(x - m).sum()))
        ranked: list[tuple[int, float]] = []
        if top:
            k = min(top, x.shape[0])
            ids = np.argpartition(-x, k - 1)[:k]
            ids = ids[np.lexsort((ids, -x[ids]))]
            ranked = [(int(i), float(x[i] - lse)) for i in ids if x[i] > -np.inf]
        return TokenLogprob(token, float(x[token] - lse), ranked)

    def probabilities(self, logits: NDArray[Any]) -> NDArray[Any]:
        """The distribution ``sample`` draws from, as a float64 vector over the vocabulary
        (zero for filtered tokens).  The penalty window is used, the RNG is not."""
        ids, w = self._candidates(logits)
        out = np.zeros(np.shape(logits)[0], dtype=np.float64)
        out[slice(None) if ids is None else ids] = w.astype(np.float64) / w.sum(dtype=np.float64)
        return out

    def _candidates(self, logits: NDArray[Any]) -> tuple[Optional[NDArray[Any]], NDArray[Any]]:
        """Survivors of the chain (ids in draw order, or None for all ids in order)
        and their unnormalised weights (possibly a view of a scratch buffer)."""
        x, imax = self._check_logits(logits)
        n = x.shape[0]
        if ((self.temperature < _GREEDY_BELOW or self.top_k == 1) and self.logit_bias and self.grammar is None
                and not self._penalizes()):
            best = self._greedy_with_bias(x, imax)
            if best is not None:
                return np.array([best]), np.ones(1, dtype=np.float32)
        y = self._apply_bias_and_penalties(x, n)
        if y is not x:
            x = y
            imax = int(np.argmax(x))
        top = float(x[imax])
        if top == -math.inf:
            if self.grammar is not None:
                from .structured import GrammarError

                raise GrammarError("the grammar allows no token here that the logit bias leaves")
            raise ValueError("logits: every token has logit -inf (nothing to sample)")
        if self.temperature < _GREEDY_BELOW or self.top_k == 1:
            return np.array([imax]), np.ones(1, dtype=np.float32)

        ids, vals, is_sorted = self._top_k(x, n)
        if self.top_p < 1.0:
            ids, vals = self._top_p(x, ids, vals, is_sorted, top)
        if self.min_p > 0.0:
            keep = vals >= np.float32(top + math.log(self.min_p))
            if not keep.all():
                ids = np.flatnonzero(keep) if ids is None else ids[keep]
                vals = vals[keep]
        # Survivors stay in id order when neither top-k nor top-p sorted them
        # (no full sort just for the draw).
        return ids, self._weights(vals, top, self.temperature)

    def _weights(self, vals: NDArray[Any], top: float, temperature: float = 1.0) -> NDArray[Any]:
        """``exp((vals - top) / temperature)`` in float32, in a buffer kept between draws
        (a fresh vocabulary-sized array per draw costs page faults)."""
        n = vals.shape[0]
        if self._buf.shape[0] < n:
            self._buf = np.empty(n, dtype=np.float32)
        w = self._buf[:n]
        np.subtract(vals, np.float32(top), out=w)
        if temperature != 1.0:
            # A tiny temperature sends the gaps to -inf (weight 0, as meant), not a warning.
            with np.errstate(over="ignore"):
                np.divide(w, np.float32(temperature), out=w)
        np.exp(w, out=w)
        return w

    def _check_logits(self, logits: object) -> tuple[NDArray[Any], int]:
        if not isinstance(logits, np.ndarray):
            raise TypeError(f"logits: expected a numpy array, got {type(logits).__name__}")
        if logits.ndim != 1 or logits.shape[0] == 0:
            raise ValueError(f"logits: expected a non-empty 1-D array, got shape {logits.shape}")
        if logits.dtype != np.float32:
            if not np.issubdtype(logits.dtype, np.floating):
                raise TypeError(f"logits: expected float32, got {logits.dtype}")
            logits = logits.astype(np.float32)
        imax = int(np.argmax(logits))  # the first NaN, if any, else the first maximum
        top = logits[imax]
        if np.isnan(top):
            raise ValueError("logits: contains NaN")
        if top == np.inf:
            raise ValueError("logits: contains +inf")
        return logits, imax

    def _apply_bias_and_penalties(self, x: NDArray[Any], n: int) -> NDArray[Any]:
        """Steps 1, 2 and 2b of the chain (a copy; ``x`` itself when none applies)."""
        y = self._bias_and_penalties(x, n)
        if self.grammar is not None:
            y = self.grammar.apply(y)
        return y

    def _penalizes(self) -> bool:
        return bool(self._counts) and (self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0
                                       or self.presence_penalty != 0.0)

    def _greedy_with_bias(self, x: NDArray[Any], imax: int) -> Optional[int]:
        """np.argmax of x with the logit bias added, without copying x (a server samples
        a vocabulary of logits per slot and step): the unbiased maximum x[imax] against
        the biased tokens, the lowest id on ties.  None when the general path must
        decide (imax is biased, a bias id is out of range, or the result would be NaN
        or -inf: that path raises)."""
        top = x[imax]
        pairs = self._bias_pairs
        if pairs is not None:
            return self._greedy_with_few_biases(x, imax, top, pairs)
        ids = self._bias_ids
        if int(ids.max()) >= x.shape[0] or bool((ids == imax).any()):
            return None
        vals = x[ids] + self._bias_values
        m = vals.max()
        if np.isnan(vals).any() or max(m, top) == -np.inf:
            return None
        if m < top:
            return imax
        tied = int(ids[vals == m].min())
        return tied if m > top else min(tied, imax)

    @staticmethod
    def _greedy_with_few_biases(x: NDArray[Any], imax: int, top: Any,
                                pairs: list[tuple[int, np.float32]]) -> Optional[int]:
        """`_greedy_with_bias` for a handful of biased ids, on float32 scalars: the same
        sums (float32 logit + float32 bias) and the same answer."""
        n = x.shape[0]
        best, m = -1, top   # best < 0: no biased id seen yet (pairs is never empty)
        for tok, b in pairs:
            if tok >= n or tok == imax:
                return None
            v = x[tok] + b
            if v != v:   # NaN
                return None
            if best < 0 or v > m or (v == m and tok < best):
                m, best = v, tok
        if max(m, top) == -np.inf:
            return None
        if m < top:
            return imax
        return best if m > top else min(best, imax)

    def _bias_and_penalties(self, x: NDArray[Any], n: int) -> NDArray[Any]:
        penalize = self._penalizes()
        if not self.logit_bias and not penalize:
            return x
        x = x.copy()  # never touch the caller's array
        if self.logit_bias:
            if int(self._bias_ids.max()) >= n:
                bad = int(self._bias_ids[self._bias_ids >= n][0])
                raise ValueError(f"logit_bias: token {bad} is outside the vocabulary [0, {n})")
            x[self._bias_ids] += self._bias_values
        if penalize:
            toks = np.fromiter(self._counts.keys(), dtype=np.int64, count=len(self._counts))
            cnts = np.fromiter(self._counts.values(), dtype=np.float32, count=len(self._counts))
            inside = toks < n  # ids beyond this vocabulary have no logit to penalise
            toks, cnts = toks[inside], cnts[inside]
            v = x[toks]
            rp = np.float32(self.repeat_penalty)
            v = np.where(v <= 0, v * rp, v / rp)
            v -= cnts * np.float32(self.frequency_penalty) + np.float32(self.presence_penalty)
            x[toks] = v
        return x

    def _top_k(self, x: NDArray[Any], n: int) -> tuple[Optional[NDArray[Any]], NDArray[Any], bool]:
        """Candidates (ids, logits) after top-k; sorted descending when top-k ran."""
        k = self.top_k
        if 0 < k < n:
            ids = _holding_largest(x, k)
            vals = x[ids]
            m = vals.shape[0]
            # k-th largest value, then everything >= it; ties cut at the lower ids
            kth = np.partition(vals, m - k)[m - k]
            keep = vals >= kth
            ids, vals = _sort_desc(ids[keep], vals[keep])
            return ids[:k], vals[:k], True
        finite = x > -np.inf
        if finite.all():
            return None, x, False
        ids = np.flatnonzero(finite)
        return ids, x[ids], False

    def _top_p(self, x: NDArray[Any], ids: Optional[NDArray[Any]], vals: NDArray[Any], is_sorted: bool,
               top: float) -> tuple[NDArray[Any], NDArray[Any]]:
        p = self.top_p
        # Softmax weights relative to the largest logit; float32 exp, float64 sums.
        shift = np.float32(top)
        total = float(self._weights(vals, top).sum(dtype=np.float64))
        if not is_sorted:
            # Partial selection: sort only (at least) the m most probable candidates,
            # widening m until their mass reaches p; a full sort only as the last resort.
            m = 256
            while True:
                if m >= vals.shape[0]:
                    all_ids = np.arange(vals.shape[0]) if ids is None else ids
                    s_ids, s_vals = _sort_desc(all_ids, vals)
                    break
                sel = _holding_largest(vals, m)
                s_ids, s_vals = _sort_desc(sel if ids is None else ids[sel], vals[sel])
                mass = float(np.exp(s_vals - shift, dtype=np.float32).sum(dtype=np.float64))
                if mass >= p * total:
                    break
                m *= 8
            ids, vals = s_ids, s_vals
        assert ids is not None  # only an unsorted "every token" comes without ids
        cum = np.cumsum(np.exp(vals - shift, dtype=np.float32), dtype=np.float64)
        cut = _crossing(cum, p * total)
        return ids[:cut], vals[:cut]


def _holding_largest(x: NDArray[Any], m: int) -> NDArray[Any]:
    """Increasing indices of a subset of ``x`` that holds every value >= its m-th
    largest (so at least m of them, ties included), found without sorting ``x``.

    A threshold from every 64th value that about 4m values pass; when fewer than m
    pass (unlucky sample), the m-th largest value itself by ``np.partition``.
    """
    n = x.shape[0]
    if n >= 4096 and m * 8 < n:
        sample = x[::64]
        rank = min(sample.shape[0], 4 * (m // 64) + 8)
        t = np.partition(sample, sample.shape[0] - rank)[sample.shape[0] - rank]
        ids = np.flatnonzero(x >= t)
        if ids.shape[0] >= m:
            return ids
    if m >= n:
        return np.arange(n)
    return np.flatnonzero(x >= np.partition(x, n - m)[n - m])


_BLOCK = 1024


def _draw(w: NDArray[Any], u: float) -> int:
    """Index of the first weight whose running sum exceeds ``u`` times the total.

    Long vectors are summed by blocks of 1024 first (float64 across blocks), then
    only the block that holds the draw is scanned, so no full cumulative sum.
    """
    n = w.shape[0]
    if n <= 4 * _BLOCK:
        cum = np.cumsum(w.astype(np.float64))
        i = int(np.searchsorted(cum, u * cum[-1], side="right"))
    else:
        m = n - n % _BLOCK
        sums = w[:m].reshape(-1, _BLOCK).sum(axis=1).astype(np.float64)
        if m < n:
            sums = np.append(sums, float(w[m:].sum()))
        bcum = np.cumsum(sums)
        target = u * bcum[-1]
        b = min(int(np.searchsorted(bcum, target, side="right")), bcum.shape[0] - 1)
        start = b * _BLOCK
        base = float(bcum[b - 1]) if b else 0.0
        cum = base + np.cumsum(w[start:start + _BLOCK].astype(np.float64))
        i = start + int(np.searchsorted(cum, target, side="right"))
    i = min(i, n - 1)
    while w[i] == 0 and i > 0:  # rounding at a block edge must not pick a banned token
        i -= 1
    return int(i)


def _crossing(cum: NDArray[Any], target: float) -> int:
    """Length of the shortest prefix whose mass reaches ``target`` (all if none does)."""
    i = int(np.searchsorted(cum, target, side="left"))
    return min(i + 1, int(cum.shape[0]))


def _sort_desc(ids: NDArray[Any], vals: NDArray[Any]) -> tuple[NDArray[Any], NDArray[Any]]:
    """Sort by decreasing logit, ties by increasing id."""
    order = np.lexsort((ids, -vals))
    return ids[order], vals[order]
