"""Sampler: each stage on hand-computed logits, the chain order, the draw's
distribution (chi-square), seeding, the penalty window, misuse.

Expected probabilities are written out by hand (or computed in float64 from the
formulas in the docstring of each test), never with the sampler's own code.
"""
import math

import numpy as np
import pytest

from infer.sampler import Sampler

# Everything off except what a test turns on.
OFF = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
           frequency_penalty=0.0, presence_penalty=0.0)


def sampler(**kw):
    args = dict(OFF, seed=1)
    args.update(kw)
    return Sampler(**args)


def f32(values):
    return np.array(values, dtype=np.float32)


def softmax64(values):
    v = np.asarray(values, dtype=np.float64)
    e = np.exp(v - v.max())
    return e / e.sum()


def dense(n, mapping):
    out = np.zeros(n)
    for k, v in mapping.items():
        out[k] = v
    return out


# ---- each stage -----------------------------------------------------------------

def test_no_filter_is_softmax():
    logits = f32([1.0, 2.0, 3.0, 0.5, -1.0])
    p = sampler().probabilities(logits)
    np.testing.assert_allclose(p, softmax64([1.0, 2.0, 3.0, 0.5, -1.0]), rtol=1e-6)


def test_top_k():
    logits = f32([1.0, 2.0, 3.0, 0.5, -1.0])
    p = sampler(top_k=2).probabilities(logits)
    # ids 2 and 1 survive: e^3/(e^3+e^2) = 1/(1+e^-1)
    a = 1.0 / (1.0 + math.exp(-1.0))
    np.testing.assert_allclose(p, dense(5, {2: a, 1: 1 - a}), rtol=1e-6, atol=1e-12)


def test_top_k_ties_keep_lower_ids():
    logits = f32([0.0, 1.0, 1.0, 1.0, 2.0])
    p = sampler(top_k=3).probabilities(logits)
    # 4 and two of the three tied 1.0s: ids 1 and 2
    e = math.e
    np.testing.assert_allclose(p, dense(5, {4: e / (e + 2), 1: 1 / (e + 2), 2: 1 / (e + 2)}),
                               rtol=1e-6, atol=1e-12)


def test_top_p_keeps_the_crossing_token():
    probs = [0.5, 0.3, 0.15, 0.05]
    logits = f32(np.log(probs))
    # cumulative 0.5, 0.8, ...: 0.75 is crossed by the 2nd token
    p = sampler(top_p=0.75).probabilities(logits)
    np.testing.assert_allclose(p, dense(4, {0: 0.5 / 0.8, 1: 0.3 / 0.8}), rtol=1e-5, atol=1e-12)
    p = sampler(top_p=0.85).probabilities(logits)
    np.testing.assert_allclose(p, dense(4, {0: 0.5 / 0.95, 1: 0.3 / 0.95, 2: 0.15 / 0.95}),
                               rtol=1e-5, atol=1e-12)
    # tiny p, and 0 (OpenAI's API takes it; llama.cpp keeps one token): the most probable alone
    assert sampler(top_p=0.01).probabilities(logits).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert sampler(top_p=0.0).probabilities(logits).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert sampler(top_p=0.0, temperature=1.5, seed=1).sample(f32([0.1, 2.0, 1.9])) == 1


def test_top_p_partial_selection_matches_full_sort():
    """Without top-k, top-p widens a partial selection; the kept set must be what a
    full descending sort gives."""
    rng = np.random.default_rng(5)
    for n, scale, top_p in ((3000, 1.0, 0.9), (70_000, 3.0, 0.95), (1000, 0.01, 0.5)):
        logits = (rng.standard_normal(n) * scale).astype(np.float32)
        p = sampler(top_p=top_p).probabilities(logits)
        order = np.lexsort((np.arange(n), -logits.astype(np.float64)))
        probs = softmax64(logits)[order]
        keep = int(np.searchsorted(np.cumsum(probs), top_p)) + 1
        kept = np.zeros(n, dtype=bool)
        kept[order[:keep]] = True
        assert np.array_equal(p > 0, kept)
        expected = np.where(kept, softmax64(logits), 0.0)
        np.testing.assert_allclose(p, expected / expected.sum(), rtol=1e-4, atol=1e-12)


def test_min_p():
    probs = [0.5, 0.3, 0.15, 0.05]
    logits = f32(np.log(probs))
    # keep p >= 0.2 * 0.5 = 0.1
    p = sampler(min_p=0.2).probabilities(logits)
    np.testing.assert_allclose(p, dense(4, {0: 0.5 / 0.95, 1: 0.3 / 0.95, 2: 0.15 / 0.95}),
                               rtol=1e-5, atol=1e-12)
    # min_p = 1: only the maximum survives, so the draw is deterministic
    s = sampler(min_p=1.0)
    assert s.probabilities(logits).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert all(s.sample(logits) == 0 for _ in range(20))


def test_temperature():
    logits = f32([0.0, math.log(4.0)])
    # T = 2: weights 1, sqrt(4) = 2
    np.testing.assert_allclose(sampler(temperature=2.0).probabilities(logits), [1 / 3, 2 / 3],
                               rtol=1e-6)
    # T = 0.5: weights 1, 16
    np.testing.assert_allclose(sampler(temperature=0.5).probabilities(logits), [1 / 17, 16 / 17],
                               rtol=1e-6)


@pytest.mark.parametrize("temperature", [1e-50, 1e-45, 1e-40, 1e-38])
def test_a_tiny_temperature_is_greedy_without_nan_or_warnings(temperature):
    """1e-50 is 0 in float32: the weights were 0/0 = NaN (probabilities all NaN);
    1e-40 divided the gaps to -inf with overflow warnings."""
    import warnings

    logits = np.array([1.0, 3.0, 2.0, 3.0 - 1e-6, 0.5], np.float32)
    s = Sampler(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = s.probabilities(logits)
        draws = {s.sample(logits) for _ in range(20)}
    np.testing.assert_array_equal(p, [0, 1, 0, 0, 0])
    assert draws == {1}


def test_chain_order_top_p_before_temperature():
    """llama.cpp filters on the untempered distribution, then applies temperature."""
    logits = f32(np.log([0.6, 0.3, 0.1]))
    # untempered cumulative 0.6, 0.9 -> two tokens; tempered first (T=3) it would keep three
    p = sampler(top_p=0.85, temperature=3.0).probabilities(logits)
    w = np.array([0.6 ** (1 / 3), 0.3 ** (1 / 3)])
    np.testing.assert_allclose(p, [w[0] / w.sum(), w[1] / w.sum(), 0.0], rtol=1e-5, atol=1e-12)


def test_chain_order_top_k_before_top_p_and_min_p_after():
    logits = f32(np.log([0.4, 0.3, 0.2, 0.1]))
    # top-k 3 -> [0.4,0.3,0.2]/0.9; top-p 0.7: cum 0.444, 0.778 -> two tokens;
    # min-p 0.8: 0.3/0.4 = 0.75 < 0.8 -> only token 0
    assert sampler(top_k=3, top_p=0.7, min_p=0.8).probabilities(logits).tolist() == [1, 0, 0, 0]
    p = sampler(top_k=3, top_p=0.7, min_p=0.7).probabilities(logits)
    np.testing.assert_allclose(p, [4 / 7, 3 / 7, 0, 0], rtol=1e-5, atol=1e-12)


def test_repeat_penalty_divides_positive_multiplies_negative():
    logits = f32([2.0, -1.0, 0.5, 1.0])
    s = sampler(repeat_penalty=2.0, temperature=1.0)
    s.accept(0)
    s.accept(1)
    s.accept(1)  # the count does not matter for the repeat penalty
    p = s.probabilities(logits)
    np.testing.assert_allclose(p, softmax64([1.0, -2.0, 0.5, 1.0]), rtol=1e-6)


def test_frequency_and_presence_penalties():
    logits = f32([2.0, -1.0, 0.5, 1.0])
    s = sampler(frequency_penalty=0.5, presence_penalty=0.25)
    for t in (0, 0, 0, 2):
        s.accept(t)
    # token 0: count 3 -> 2 - 1.5 - 0.25; token 2: count 1 -> 0.5 - 0.5 - 0.25
    p = s.probabilities(logits)
    np.testing.assert_allclose(p, softmax64([0.25, -1.0, -0.25, 1.0]), rtol=1e-6)


def test_penalty_window_slides():
    logits = f32([1.0, 1.0, 1.0, 1.0])
    s = sampler(repeat_penalty=4.0, repeat_last_n=3)
    for t in (0, 1, 2, 3):
        s.accept(t)
    assert s.history == [1, 2, 3]
    # token 0 has left the window
    np.testing.assert_allclose(s.probabilities(logits), softmax64([1.0, 0.25, 0.25, 0.25]),
                               rtol=1e-6)
    s.set_history([3, 3, 0, 1, 2, 0])
    assert s.history == [1, 2, 0]
    np.testing.assert_allclose(s.probabilities(logits), softmax64([0.25, 0.25, 0.25, 1.0]),
                               rtol=1e-6)
    s.reset()
    assert s.history == []
    off = sampler(repeat_penalty=4.0, repeat_last_n=0)
    off.accept(0)
    assert off.history == []


def test_logit_bias():
    logits = f32([1.0, 2.0, 3.0])
    s = sampler(logit_bias={2: -math.inf, 0: 1.0})
    np.testing.assert_allclose(s.probabilities(logits), [0.5, 0.5, 0.0], rtol=1e-6)
    assert sampler(temperature=0, logit_bias={0: 5.0}).sample(logits) == 0


def test_caller_array_untouched():
    logits = f32(np.linspace(-3, 3, 1000))
    before = logits.copy()
    s = Sampler(repeat_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1,
                logit_bias={5: 2.0, 999: -math.inf}, seed=3)
    for t in range(0, 1000, 7):
        s.accept(t)
    for _ in range(10):
        s.sample(logits)
    s.probabilities(logits)
    assert np.array_equal(logits, before)


# ---- greedy and edge cases ------------------------------------------------------

def test_greedy():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(49152).astype(np.float32)
    expected = int(np.argmax(logits))
    assert Sampler(temperature=0.0, seed=1).sample(logits) == expected
    assert Sampler(top_k=1, temperature=1.5, seed=1).sample(logits) == expected
    ties = f32([0.0, 3.0, 1.0, 3.0])
    assert Sampler(temperature=0.0).sample(ties) == 1


def test_greedy_sees_penalties():
    s = Sampler(temperature=0.0, repeat_penalty=2.0)
    s.accept(1)
    assert s.sample(f32([1.0, 1.5, 0.0])) == 0


def test_neg_inf_logits_are_never_drawn():
    logits = f32([-np.inf, 0.0, -np.inf, 0.0, -np.inf])
    for kw in (dict(), dict(top_k=4), dict(top_p=0.99), dict(min_p=0.5)):
        s = sampler(**kw)
        draws = {s.sample(logits) for _ in range(200)}
        assert draws == {1, 3}, kw
    with pytest.raises(ValueError, match="-inf"):
        sampler().sample(f32([-np.inf, -np.inf]))
    with pytest.raises(ValueError, match="-inf"):
        sampler(logit_bias={0: -math.inf}).sample(f32([1.0]))


def test_single_token_vocabulary():
    assert Sampler(seed=0).sample(f32([0.3])) == 0


# ---- the draw -------------------------------------------------------------------

def _chi_square_critical(df, z=3.719):
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.719: 1 - 1e-4)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("kw", [
    dict(temperature=0.8, top_k=5, top_p=1.0, min_p=0.0),
    dict(temperature=1.3, top_k=0, top_p=0.9, min_p=0.0),
    dict(temperature=0.7, top_k=40, top_p=0.95, min_p=0.05),
])
def test_draws_follow_the_filtered_distribution(kw):
    logits = f32([2.0, 1.5, 1.2, 1.0, 0.3, 0.0, -0.5, -2.0, -3.0, -6.0])
    n_draws = 20000
    s = Sampler(seed=12345, **kw)
    counts = np.bincount([s.sample(logits) for _ in range(n_draws)], minlength=logits.size)
    # expected distribution, from the chain written out in float64
    v = logits.astype(np.float64)
    order = np.argsort(-v, kind="stable")
    keep = np.zeros(v.size, dtype=bool)
    k = kw["top_k"] if kw["top_k"] > 0 else v.size
    keep[order[:k]] = True
    if kw["top_p"] < 1:
        p = np.where(keep, np.exp(v - v.max()), 0)
        p /= p.sum()
        cum = np.cumsum(p[order])
        n_keep = int(np.searchsorted(cum, kw["top_p"])) + 1
        keep[:] = False
        keep[order[:n_keep]] = True
    if kw["min_p"] > 0:
        keep &= v >= v.max() + math.log(kw["min_p"])
    w = np.where(keep, np.exp((v - v.max()) / kw["temperature"]), 0)
    expected = w / w.sum() * n_draws
    assert counts[~keep].sum() == 0
    stat = (((counts - expected) ** 2)[keep] / expected[keep]).sum()
    assert stat < _chi_square_critical(keep.sum() - 1), (counts, expected)


def test_draw_rule_reproduced_independently():
    """The token for a seed is fixed by PCG64's first double and the cumulative rule."""
    logits = f32([0.0, 1.0, 2.0, 0.5, -1.0, 1.5])
    for seed in (0, 1, 7, 2024, 99991):
        s = Sampler(temperature=1.0, top_k=4, top_p=1.0, min_p=0.0, seed=seed)
        got = [s.sample(logits) for _ in range(5)]
        rng = np.random.Generator(np.random.PCG64(seed))
        survivors = [2, 5, 1, 3]  # decreasing logit
        w = np.exp(np.array([2.0, 1.5, 1.0, 0.5]) - 2.0)
        cum = np.cumsum(w)
        expected = []
        for _ in range(5):
            u = rng.random() * cum[-1]
            expected.append(survivors[int(np.argmax(cum > u))])
        assert got == expected


def test_seeded_reproducible_and_reset():
    logits = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    a = Sampler(seed=42, top_k=0, top_p=1.0, min_p=0.0)
    first = [a.sample(logits) for _ in range(50)]
    b = Sampler(seed=42, top_k=0, top_p=1.0, min_p=0.0)
    assert [b.sample(logits) for _ in range(50)] == first
    a.reset()
    assert [a.sample(logits) for _ in range(50)] == first
    c = Sampler(seed=43, top_k=0, top_p=1.0, min_p=0.0)
    assert [c.sample(logits) for _ in range(50)] != first


def test_set_history_leaves_rng_alone():
    logits = np.random.default_rng(2).standard_normal(300).astype(np.float32)
    a = Sampler(seed=5, top_k=0, min_p=0.0)
    b = Sampler(seed=5, top_k=0, min_p=0.0)
    a.sample(logits)
    b.sample(logits)
    b.set_history([1, 2, 3])  # neutral penalties: only the RNG state matters
    assert [a.sample(logits) for _ in range(20)] == [b.sample(logits) for _ in range(20)]


def test_unseeded_samplers_differ():
    logits = np.zeros(1000, dtype=np.float32)
    a, b = Sampler(top_k=0, min_p=0.0), Sampler(top_k=0, min_p=0.0)
    assert a.seed != b.seed
    assert [a.sample(logits) for _ in range(20)] != [b.sample(logits) for _ in range(20)]


# ---- misuse ---------------------------------------------------------------------

@pytest.mark.parametrize("kw, exc, match", [
    (dict(temperature=-0.1), ValueError, "temperature"),
    (dict(temperature=float("nan")), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature"),
    (dict(top_p=-0.1), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(min_p=-0.1), ValueError, "min_p"),
    (dict(min_p=1.1), ValueError, "min_p"),
    (dict(top_k=2.5), TypeError, "top_k"),
    (dict(repeat_penalty=0.0), ValueError, "repeat_penalty"),
    (dict(repeat_last_n=-1), ValueError, "repeat_last_n"),
    (dict(frequency_penalty=float("inf")), ValueError, "frequency_penalty"),
    (dict(presence_penalty=float("nan")), ValueError, "presence_penalty"),
    (dict(logit_bias=[1, 2]), TypeError, "logit_bias"),
    (dict(logit_bias={-1: 1.0}), ValueError, "logit_bias"),
    (dict(logit_bias={1: float("nan")}), ValueError, "logit_bias"),
    (dict(seed=-5), ValueError, "seed"),
    (dict(seed=1.5), TypeError, "seed"),
])
def test_bad_parameters(kw, exc, match):
    with pytest.raises(exc, match=match):
        Sampler(**kw)


def test_bad_logits():
    s = Sampler(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        s.sample(f32([0.0, np.nan, 1.0]))
    with pytest.raises(ValueError, match=r"\+inf"):
        s.sample(f32([0.0, np.inf]))
    with pytest.raises(ValueError, match="1-D"):
        s.sample(np.zeros((2, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="1-D"):
        s.sample(np.zeros(0, dtype=np.float32))
    with pytest.raises(TypeError, match="numpy"):
        s.sample([0.0, 1.0])
    with pytest.raises(TypeError, match="float32"):
        s.sample(np.arange(4))
    with pytest.raises(ValueError, match="logit_bias"):
        Sampler(logit_bias={10: 1.0}).sample(f32([0.0, 1.0]))
    with pytest.raises(ValueError, match="token"):
        s.accept(-1)
    with pytest.raises(TypeError, match="token"):
        s.accept(1.5)


def test_draw_over_long_vectors_follows_the_cumulative_rule():
    """Past 4096 survivors the draw sums by blocks; the token must still be the first
    whose running sum (float64, id order) exceeds u * total."""
    rng = np.random.default_rng(9)
    for n in (5000, 10_000, 70_001):
        logits = (rng.standard_normal(n) * 2).astype(np.float32)
        logits[rng.choice(n, n // 10, replace=False)] = -np.inf
        for seed in (3, 4):
            s = sampler(seed=seed)
            got = [s.sample(logits) for _ in range(30)]
            ref = np.random.Generator(np.random.PCG64(seed))
            w = np.exp(logits.astype(np.float64) - logits.max())
            cum = np.cumsum(w)
            expected = [int(np.searchsorted(cum, ref.random() * cum[-1], side="right"))
                        for _ in range(30)]
            assert got == expected
            assert all(np.isfinite(logits[t]) for t in got)


@pytest.mark.parametrize("k", [1 + 1, 40, 100, 5000])
def test_top_k_on_large_vocabularies_matches_a_full_sort(k):
    """Past 4096 logits top-k pre-selects with a sampled threshold; the kept set must
    still be the k largest, ties at the cut going to the lower ids."""
    rng = np.random.default_rng(k)
    n = 49152
    for logits in (
        rng.standard_normal(n).astype(np.float32),
        np.round(rng.standard_normal(n) * 2).astype(np.float32),  # heavy ties
        np.where(rng.random(n) < 0.9, -np.inf, rng.standard_normal(n)).astype(np.float32),
        np.zeros(n, dtype=np.float32),
    ):
        p = sampler(top_k=k).probabilities(logits)
        order = np.lexsort((np.arange(n), -logits.astype(np.float64)))[:k]
        kept = np.zeros(n, dtype=bool)
        kept[order] = True
        kept &= np.isfinite(logits)
        assert np.array_equal(p > 0, kept)


def test_greedy_with_logit_bias_is_the_argmax_of_the_biased_logits():
    """Greedy sampling with a logit bias (and nothing else) takes a path that does not
    copy the logits; it must pick np.argmax of the biased copy, the lowest id on ties,
    whether the maximum is biased or not, and raise when every token ends at -inf.
    Up to 8 biased ids take a scalar path, more a vectorised one: both are drawn."""
    rng = np.random.default_rng(0)
    for _ in range(4000):
        n = int(rng.integers(1, 40))
        x = rng.integers(-3, 4, n).astype(np.float32)   # small integers: many ties
        if rng.random() < 0.2:
            x[rng.integers(0, n)] = -np.inf
        ids = rng.choice(n, int(rng.integers(1, min(n, 14) + 1)), replace=False)
        vals = rng.choice([-100.0, -1.0, 0.0, 1.0, 2.0, 5.0, 0.1, -np.inf], ids.size)
        bias = {int(i): float(v) for i, v in zip(ids, vals)}
        y = x.copy()
        y[ids] += vals.astype(np.float32)
        sampler = Sampler(temperature=0, logit_bias=bias)
        if y.max() == -np.inf:
            with pytest.raises(ValueError, match="-inf"):
                sampler.sample(x)
        else:
            assert sampler.sample(x) == int(np.argmax(y)), (x, bias)
