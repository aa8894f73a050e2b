"""llama-server's own endpoints, beside OpenAI's: what scripts and UIs written for
llama.cpp's server call.

``POST /completion`` (and ``/completions``, as llama-server routes it) runs through
the same scheduler slots as ``/v1/completions`` (`_Server.run_completion`), with
llama-server's request fields (``n_predict``, ``n_probs``, ``ignore_eos``,
``logit_bias`` as pairs, ...) and its response (``content``, ``tokens``,
``stop_type``, ``generation_settings``, ``timings``, ``completion_probabilities``);
streamed, each event is one such object, the last one with ``"stop": true`` and no
``[DONE]`` after it.  ``POST /tokenize``, ``/detokenize``, ``/apply-template`` and
``GET /props``, ``/slots`` answer as llama-server's do.

The field names, defaults and shapes follow llama.cpp's tools/server (server-schema.cpp
for the request, server-task.cpp for the response, server-context.cpp for the routes).
Unlike llama-server, a field this server does not know, or a sampler it does not
have switched on (``typical_p`` other than 1, ``mirostat``, ``dry_multiplier``,
``xtc_probability``, ...), is a 400 naming the field rather than ignored.  Errors
have llama-server's shape, ``{"error": {"code", "message", "type"}}``.
"""
from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Union

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .. import __version__, api
from ..api import InvalidRequestError, UnsupportedOptionError
from ..runtime import LONG_TEXT, run_apart
from .app import Dialect
from .scheduler import _common_prefix

if TYPE_CHECKING:
    from .app import _Server

__all__ = ["create_completion", "routes"]

#: llama-server's error types by HTTP status (server-common.cpp, format_error_response)
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 501: "not_supported_error", 503: "unavailable_error"}

#: llama.cpp's LLAMA_DEFAULT_SEED: a fresh random seed per request
RANDOM_SEED = 0xFFFFFFFF

#: infer's sampling chain in llama.cpp's sampler names (`infer.sampler`; logit bias first)
SAMPLERS = ("penalties", "top_k", "top_p", "min_p", "temperature")

#: llama.cpp samplers infer does not have, with the value that switches each off: a
#: request may send that value (llama.cpp's web UI sends them all), any other is a 400
_OFF_SWITCHES: dict[str, float] = {"typical_p": 1.0, "dynatemp_range": 0.0, "xtc_probability": 0.0,
                                   "mirostat": 0.0, "dry_multiplier": 0.0, "top_n_sigma": -1.0}
#: the settings of those samplers: inert while their sampler is off, as in llama.cpp
_INERT_SETTINGS: dict[str, float] = {"dynatemp_exponent": 1.0, "xtc_threshold": 0.1, "mirostat_tau": 5.0,
                                     "mirostat_eta": 0.1, "dry_base": 1.75, "dry_allowed_length": 2,
                                     "dry_penalty_last_n": -1, "min_keep": 0}


#: llama-server's own request fields, beyond OpenAI's, that its OpenAI endpoints take as
#: /completion does (params_from_json_cmpl reads every endpoint's body): the samplers
#: infer lacks at their off values, and these
LLAMA_ONLY_FIELDS = frozenset({"n_predict", "ignore_eos", "id_slot", *_OFF_SWITCHES, *_INERT_SETTINGS})


def take_llama_fields(model: Any, body: dict[str, Any]) -> None:
    """Replace llama-server's own fields (`LLAMA_ONLY_FIELDS`) in an OpenAI request body
    by the api keywords they mean, with /completion's rules: ``n_predict`` is the reply
    limit (before ``max_tokens``, -1 none), ``ignore_eos`` bans the end-of-generation
    tokens, ``id_slot`` only -1, the samplers infer lacks only off; else
    InvalidRequestError naming the field."""
    given = {name: body.pop(name) for name in LLAMA_ONLY_FIELDS if name in body}
    _check_unsupported_samplers(given)
    _check_id_slot(given.get("id_slot"))
    if given.get("n_predict") is not None:
        limit = reply_limit({"n_predict": given["n_predict"]})
        body.pop("max_completion_tokens", None)
        body["max_tokens"] = limit  # None (-1): no limit but the context, as llama-server's
    if api._check_bool("ignore_eos", given.get("ignore_eos", False)):
        from ..generate import end_of_turn_ids

        bias = body.get("logit_bias")
        if bias is not None and not isinstance(bias, dict):
            raise InvalidRequestError("logit_bias: expected an object mapping token ids to numbers", "logit_bias")
        body["logit_bias"] = {**(bias or {}), **{str(t): -math.inf for t in end_of_turn_ids(model.tokenizer)}}


def _check_id_slot(id_slot: Any) -> None:
    if id_slot is not None and api._check_optional_int("id_slot", id_slot, -1) != -1:
        raise UnsupportedOptionError("id_slot: slots are chosen by the scheduler (the longest cached prefix); "
                                     "only -1 is accepted", "id_slot")


def error_body(status: int, openai_body: Mapping[str, Any]) -> dict[str, Any]:
    """llama-server's error body for an OpenAI-shaped one (`app._classify`'s)."""
    error = openai_body.get("error", {})
    kind = _ERROR_TYPES.get(status, "server_error")
    if error.get("code") == "context_length_exceeded":
        kind = "exceed_context_size_error"
    return {"error": {"code": status, "message": str(error.get("message", "")), "type": kind}}


def _usage(result: Any) -> Optional[dict[str, Any]]:
    """The usage of a response (an object, or a list of them for several prompts) or
    of a stream's summary chunk (the one with ``"stop": true``)."""
    parts = result if isinstance(result, list) else [result]
    if not parts or not all(isinstance(p, Mapping) and p.get("stop") is True for p in parts):
        return None
    return api._usage(sum(int(p["tokens_evaluated"]) for p in parts),
                      sum(int(p["tokens_predicted"]) for p in parts), None)


LLAMA = Dialect(error_body=error_body, stream_end=None, usage=_usage)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(status, {"error": {"message": message}}), status_code=status)


# ---- request fields ------------------------------------------------------------------------------
def _number(name: str, value: Any) -> float:
    if not api._is_number(value):
        raise InvalidRequestError(f"{name}: expected a number, got {type(value).__name__}", name)
    return float(value)


def _check_unsupported_samplers(fields: Mapping[str, Any]) -> None:
    for name, off in _OFF_SWITCHES.items():
        if name in fields and fields[name] is not None and _number(name, fields[name]) != off:
            raise UnsupportedOptionError(f"{name}: this server has no such sampler; only {off:g} (off) is "
                                         f"accepted, got {fields[name]}", name)
    for name in _INERT_SETTINGS:
        if name in fields and fields[name] is not None:
            _number(name, fields[name])


def prompt_ids(model: Any, prompt: Any, add_special: bool, parse_special: bool, name: str = "prompt") -> list[int]:
    """The token ids of a llama-server prompt: text, token ids, or a list mixing them
    (``[12, " text", 34]``: the texts encoded, only the first one with BOS, and only
    when the list starts with it; llama.cpp's tokenize_mixed)."""
    tok = model.tokenizer
    vocab = int(model.engine.vocab_size)

    def encode(text: str, special: bool) -> list[int]:
        try:
            return list(tok.encode(text, add_special=special, parse_special=parse_special))
        except ValueError as exc:  # text UTF-8 cannot encode (a lone surrogate)
            raise InvalidRequestError(f"{name}: {exc}", name) from None

    if isinstance(prompt, str):
        return encode(prompt, add_special)
    if not isinstance(prompt, list):
        raise InvalidRequestError(f"{name}: expected a string, a list of token ids, or a list mixing token ids "
                                  f"and strings; got {type(prompt).__name__}", name)
    ids: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str):
            ids += encode(part, add_special and i == 0)
        elif api._is_int(part):
            if not 0 <= part < vocab:
                raise InvalidRequestError(f"{name}: token {part} is outside the vocabulary [0, {vocab})", name)
            ids.append(int(part))
        else:
            raise InvalidRequestError(f"{name}[{i}]: expected a token id or a string, got {type(part).__name__}",
                                      name)
    return ids


def _logit_bias(model: Any, logit_bias: Any, ignore_eos: bool) -> dict[str, float]:
    """llama-server's ``logit_bias`` as the api's ``{"token id": bias}``: pairs ``[token,
    bias]`` or an object, a token given by id or by a text (each of its tokens biased),
    ``false`` for a ban; ``ignore_eos`` bans the end-of-generation tokens."""
    from ..generate import end_of_turn_ids

    vocab = int(model.engine.vocab_size)
    out: dict[int, float] = {}

    def add(key: Any, bias: Any) -> None:
        if bias is False:
            value = -math.inf
        elif api._is_number(bias) and math.isfinite(bias):
            value = float(bias)
        else:
            raise InvalidRequestError(f"logit_bias: the bias of {key!r} must be a number or false, got {bias!r}",
                                      "logit_bias")
        if api._is_int(key) or (isinstance(key, str) and key.lstrip("-").isdigit()):
            token = int(key)
            if not 0 <= token < vocab:
                raise InvalidRequestError(f"logit_bias: token {token} is outside the vocabulary [0, {vocab})",
                                          "logit_bias")
            tokens = [token]
        elif isinstance(key, str):
            tokens = prompt_ids(model, key, False, False, "logit_bias")
        else:
            raise InvalidRequestError(f"logit_bias: expected a token id or a text, got {key!r}", "logit_bias")
        for token in tokens:  # entries add up, as llama.cpp's logit-bias sampler applies each
            out[token] = out.get(token, 0.0) + value

    if isinstance(logit_bias, list):
        for pair in logit_bias:
            if not isinstance(pair, list) or len(pair) != 2:
                raise InvalidRequestError("logit_bias: expected [token, bias] pairs or an object", "logit_bias")
            add(pair[0], pair[1])
    elif isinstance(logit_bias, dict):
        for key, bias in logit_bias.items():
            add(key, bias)
    elif logit_bias is not None:
        raise InvalidRequestError("logit_bias: expected [token, bias] pairs or an object", "logit_bias")
    if ignore_eos:
        for token in end_of_turn_ids(model.tokenizer):
            out[token] = -math.inf
    return {str(token): bias for token, bias in out.items()}


# ---- the completion ------------------------------------------------------------------------------
def create_completion(
        model: Any, prompt: Any, *, n_predict: Any = None, max_completion_tokens: Any = None, max_tokens: Any = None,
        stream: Any = False, stop: Any = None, temperature: Any = 0.8, top_k: Any = 40, top_p: Any = 0.95,
        min_p: Any = 0.05, repeat_penalty: Any = 1.0, repeat_last_n: Any = 64, presence_penalty: Any = 0.0,
        frequency_penalty: Any = 0.0, seed: Any = RANDOM_SEED, grammar: Any = None, json_schema: Any = None,
        n_probs: Any = 0, return_tokens: Any = False, ignore_eos: Any = False, logit_bias: Any = None,
        post_sampling_probs: Any = False, id_slot: Any = -1, response_fields: Any = None,
        typical_p: Any = None, dynatemp_range: Any = None, dynatemp_exponent: Any = None,
        xtc_probability: Any = None, xtc_threshold: Any = None, mirostat: Any = None, mirostat_tau: Any = None,
        mirostat_eta: Any = None, dry_multiplier: Any = None, dry_base: Any = None, dry_allowed_length: Any = None,
        dry_penalty_last_n: Any = None, top_n_sigma: Any = None, min_keep: Any = None,
        context: Any = None, model_name: Optional[str] = None) -> Any:
    """llama-server's ``POST /completion`` on a loaded model: its response object, or
    with ``stream=True`` an iterator of its chunk objects (the last one the summary,
    ``"stop": true``).  The defaults are llama-server's: ``n_predict=-1`` runs to
    the end of the text or of the context; the sampling defaults are llama.cpp's."""
    from ..generate import end_of_turn_ids, generate

    _check_unsupported_samplers(dict(
        typical_p=typical_p, dynatemp_range=dynatemp_range, xtc_probability=xtc_probability, mirostat=mirostat,
        dry_multiplier=dry_multiplier, top_n_sigma=top_n_sigma, dynatemp_exponent=dynatemp_exponent,
        xtc_threshold=xtc_threshold, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, dry_base=dry_base,
        dry_allowed_length=dry_allowed_length, dry_penalty_last_n=dry_penalty_last_n, min_keep=min_keep))
    limit = reply_limit(dict(n_predict=n_predict, max_completion_tokens=max_completion_tokens,
                             max_tokens=max_tokens))
    stream = api._check_bool("stream", stream)
    return_tokens = api._check_bool("return_tokens", return_tokens)
    ignore_eos = api._check_bool("ignore_eos", ignore_eos)
    if api._check_bool("post_sampling_probs", post_sampling_probs):
        raise UnsupportedOptionError("post_sampling_probs: the probabilities are reported before top-k, top-p, "
                                     "min-p and temperature only; send false", "post_sampling_probs")
    _check_id_slot(id_slot)
    if response_fields is not None and (not isinstance(response_fields, list)
                                        or not all(isinstance(f, str) for f in response_fields)):
        raise InvalidRequestError("response_fields: expected a list of field names", "response_fields")
    top = int(api._check_optional_int("n_probs", n_probs, 0) or 0)
    last_n = api._check_optional_int("repeat_last_n", repeat_last_n, -1)
    stops = api._check_stop(stop)
    constraint = api._completion_grammar(grammar, json_schema)
    if seed is not None and api._is_int(seed) and seed in (-1, RANDOM_SEED):
        seed = -1
    options = api._sampler_options(model, temperature, top_p, top_k, min_p, repeat_penalty, presence_penalty,
                                   frequency_penalty, _logit_bias(model, logit_bias, ignore_eos), seed)
    subprompts = _subprompts(prompt)

    def encode() -> list[list[int]]:
        return [prompt_ids(model, p, True, True) for p in subprompts]

    # a long text is tokenized off the event loop's thread, which serves the other requests
    size = sum(len(p) if isinstance(p, str) else sum(len(q) for q in p if isinstance(q, str))
               for p in subprompts if isinstance(p, (str, list)))
    prompts = encode() if size < LONG_TEXT else run_apart(context, encode)
    if not all(prompts):
        raise InvalidRequestError("prompt: is empty and the model adds no BOS token", "prompt")
    tok = model.tokenizer
    end_ids = end_of_turn_ids(tok)
    name = api._model_name(model, model_name)
    settings = generation_settings(options, limit, stops, stream, top, ignore_eos, grammar, json_schema,
                                   repeat_last_n=last_n)

    def run(ctx: Any) -> Iterator[Any]:
        """None once the checks passed; then for each prompt in turn (index, text piece,
        its tokens, their logprob records) for each piece, then (index, the finished
        Generation, prompt tokens found in the cache, start time)."""
        n_ctx = int(ctx.n_ctx)
        for ids in prompts:
            if len(ids) > n_ctx:
                raise InvalidRequestError(f"the prompt ({len(ids)} tokens) exceeds the context of {n_ctx} tokens",
                                          "prompt", "context_length_exceeded")
        sampler_options = dict(options)
        sampler_options["repeat_last_n"] = n_ctx if last_n == -1 else last_n
        yield None
        for index, ids in enumerate(prompts):
            api._use_sampler(ctx, api._make_sampler(sampler_options, 0))
            started = time.monotonic()
            held = _common_prefix(ctx.tokens, ids)
            gen = generate(model, ids, context=ctx, max_tokens=limit, stop=stops, grammar=constraint,
                           logprobs=top if top else None, stop_at_end_of_turn=not ignore_eos)
            sent = 0
            for piece in gen:
                yield index, piece, gen.tokens[sent:], None if gen.token_logprobs is None else gen.token_logprobs[sent:]
                sent = len(gen.tokens)
            # a slot counts the prefix it kept when the request takes it, at the first prefill
            cached = max(held, int(getattr(ctx, "cached_tokens", 0)) if index == 0 else 0)
            yield index, gen, cached, started

    def summary(index: int, gen: Any, ctx: Any, content: str, cached: int, started: float,
                first: Optional[float]) -> dict[str, Any]:
        ended = time.monotonic()
        ids = prompts[index]
        if gen.finish_reason == "stop" and gen.stop_string is None:
            stop_type = "eos"
        elif gen.finish_reason == "stop":
            stop_type = "word"
        else:
            stop_type = "limit"
        first = ended if first is None else first
        n_gen = len(gen.tokens)
        result: dict[str, Any] = {
            "index": index, "content": content, "tokens": list(gen.tokens) if return_tokens and not stream else [],
            "id_slot": _slot_of(ctx), "stop": True, "model": name, "tokens_predicted": n_gen,
            "tokens_evaluated": len(ids), "generation_settings": settings,
            "prompt": tok.decode(ids), "has_new_line": "\n" in gen.text, "truncated": False,
            "stop_type": stop_type, "stopping_word": gen.stop_string or "", "tokens_cached": int(ctx.n_past),
            "timings": timings(cached, len(ids) - cached, first - started, n_gen, ended - first)}
        if top and not stream and gen.token_logprobs is not None:
            records = list(gen.token_logprobs)
            if stop_type == "eos" and records and gen.tokens[-1] in end_ids:
                records = records[:-1]  # the end token has no text: llama-server reports none for it
            elif stop_type == "word":  # nor for the stop string's tokens (as many as it encodes to)
                records = records[:len(records) - min(len(records), len(tok.encode(gen.stop_string,
                                                                                   add_special=False)))]
            result["completion_probabilities"] = [probability_entry(tok, r) for r in records]
        return result if not response_fields else _pick_fields(result, response_fields)

    def first_token_at(ctx: Any, index: int, started: float) -> float:
        """When the prompt's first token came (the slot knows it for the first prompt)."""
        at = getattr(ctx, "first_token_at", None) if index == 0 else None
        return at if isinstance(at, float) and at >= started else time.monotonic()

    if stream:
        def chunks() -> Iterator[Any]:
            with api._context_for(model, context) as ctx:
                steps = run(ctx)
                yield next(steps)
                first: dict[int, float] = {}
                predicted: dict[int, int] = {}
                began = time.monotonic()
                for item in steps:
                    if isinstance(item[1], str):
                        index, piece, tokens, records = item
                        first.setdefault(index, first_token_at(ctx, index, began))
                        predicted[index] = predicted.get(index, 0) + len(tokens)
                        chunk: dict[str, Any] = {
                            "index": index, "content": piece, "tokens": list(tokens), "stop": False,
                            "id_slot": _slot_of(ctx), "tokens_predicted": predicted[index],
                            "tokens_evaluated": len(prompts[index])}
                        if records:
                            chunk["completion_probabilities"] = [probability_entry(tok, r) for r in records]
                        yield chunk
                    else:
                        index, gen, cached, started = item
                        yield summary(index, gen, ctx, "", cached, started, first.get(index))
                        began = time.monotonic()
        return api._eager(chunks())
    with api._context_for(model, context) as ctx:
        steps = run(ctx)
        next(steps)
        results = []
        pieces: list[str] = []
        first: Optional[float] = None
        began = time.monotonic()
        for item in steps:
            if isinstance(item[1], str):
                first = first or first_token_at(ctx, item[0], began)
                pieces.append(item[1])
            else:
                index, gen, cached, started = item
                results.append(summary(index, gen, ctx, "".join(pieces), cached, started, first))
                pieces, first, began = [], None, time.monotonic()
    # one prompt: its object; several: the list of them, as llama-server answers
    return results[0] if len(results) == 1 else results


def create_infill(model: Any, input_prefix: Any = None, input_suffix: Any = None, input_extra: Any = None,
                  prompt: Any = None, *, context: Any = None, server_n_predict: int = -1, spm_infill: bool = False,
                  **fields: Any) -> Any:
    """llama-server's ``POST /infill``: the code between ``input_prefix`` and
    ``input_suffix`` (texts, or token ids mixed with texts), with other files'
    ``input_extra`` chunks ({"filename", "text"}) as context and ``prompt`` continued
    after the prefix, in its fill-in-the-middle layout (`infer.infill`); the rest as
    `create_completion` (its fields, response and stream).  ``server_n_predict`` is
    the server's ``-n`` (-1: none), which bounds the extra context as llama-server's
    does.  A model without FIM tokens raises `infill.InfillUnsupportedError`."""
    from ..infill import infill_prompt

    for name, value in (("input_prefix", input_prefix), ("input_suffix", input_suffix)):
        if value is None:
            raise InvalidRequestError(f'"{name}" is required', name)
    if prompt is not None and not isinstance(prompt, str):
        raise InvalidRequestError('"prompt" must be a string', "prompt")
    if input_extra is None:
        input_extra = []
    if not isinstance(input_extra, list):
        raise InvalidRequestError('"input_extra" must be an array of {"filename": string, "text": string}',
                                  "input_extra")
    extra = []
    for i, chunk in enumerate(input_extra):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise InvalidRequestError(f'input_extra[{i}]: must contain a "text" field with a string value',
                                      "input_extra")
        name = chunk.get("filename", "tmp")
        if not isinstance(name, str):
            raise InvalidRequestError(f'input_extra[{i}]: "filename" must be a string', "input_extra")
        extra.append((name, chunk["text"]))
    if context is None:
        context = model.create_context()
    ids = infill_prompt(model.tokenizer, prompt_ids(model, input_prefix, False, False, "input_prefix"),
                        prompt_ids(model, input_suffix, False, False, "input_suffix"), extra,
                        prompt_ids(model, prompt or "", False, True), n_ctx=int(context.n_ctx),
                        n_predict=server_n_predict, suffix_first=spm_infill)
    return create_completion(model, ids, context=context, **fields)


def _pick_fields(result: Mapping[str, Any], paths: list[str]) -> dict[str, Any]:
    """``response_fields``: the fields named, a path ``a/b`` under its own name at the
    top; those missing left out (llama.cpp's json_get_nested_values)."""
    out: dict[str, Any] = {}
    for path in paths:
        value: Any = result
        for key in path.split("/"):
            if not isinstance(value, Mapping) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out


def reply_limit(fields: Mapping[str, Any]) -> Optional[int]:
    """The longest reply of a request: ``n_predict``, or its aliases in llama-server's
    order (server-schema.cpp); -1 or none for no limit but the context."""
    for name in ("n_predict", "max_completion_tokens", "max_tokens"):
        if fields.get(name) is not None:
            value = api._check_optional_int(name, fields[name], -1)
            return None if value == -1 else value
    return None


def _subprompts(prompt: Any) -> list[Any]:
    """The prompts of a request: a list holding no token id is a list of prompts
    (llama-server's tokenize_input_prompts), anything else one prompt."""
    if isinstance(prompt, list) and prompt and not any(api._is_int(p) for p in prompt):
        for i, part in enumerate(prompt):
            if isinstance(part, dict):
                raise UnsupportedOptionError(f"prompt[{i}]: multimodal prompts are not supported", "prompt")
        return list(prompt)
    return [prompt]




def _slot_of(ctx: Any) -> int:
    slot = getattr(ctx, "slot", None)
    return slot if isinstance(slot, int) else -1


def probability_entry(tokenizer: Any, record: Any) -> dict[str, Any]:
    """llama-server's ``completion_probabilities`` entry of a sampled token (its
    `infer.sampler.TokenLogprob`): id, token text, bytes, logprob and ``top_logprobs``."""

    def one(token: int, logprob: float) -> dict[str, Any]:
        piece = bytes(tokenizer.token_to_piece(token))
        return {"id": int(token), "token": piece.decode("utf-8", errors="ignore"), "bytes": list(piece),
                "logprob": float(logprob)}

    entry = one(record.token, record.logprob)
    entry["top_logprobs"] = [one(t, v) for t, v in record.top]
    return entry


def timings(cached: int, prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float) -> dict[str, Any]:
    """llama-server's ``timings`` object (server-common.cpp, server_slot_stats::to_json)."""
    prompt_ms, predicted_ms = prompt_s * 1e3, predicted_s * 1e3
    return {"cache_n": cached, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / prompt_n if prompt_n else 0.0,
            "prompt_per_second": 1e3 * prompt_n / prompt_ms if prompt_ms > 0 else 0.0,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / predicted_n if predicted_n else 0.0,
            "predicted_per_second": 1e3 * predicted_n / predicted_ms if predicted_ms > 0 else 0.0}


def generation_settings(options: Mapping[str, Any], n_predict: Optional[int], stops: list[str], stream: bool,
                        n_probs: int, ignore_eos: bool, grammar: Any, json_schema: Any,
                        repeat_last_n: Optional[int] = 64) -> dict[str, Any]:
    """llama-server's ``generation_settings`` (server-task.cpp, task_params::to_json) with
    the values this request runs with: infer's sampler options, and the samplers it
    does not have at their off values."""
    from ..sampler import Sampler

    defaults = Sampler(seed=0)
    seed = options.get("seed")
    bias = options.get("logit_bias") or {}
    settings: dict[str, Any] = {
        "seed": RANDOM_SEED if seed is None else int(seed),
        "temperature": float(options.get("temperature", defaults.temperature)),
        "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
        "top_k": int(options.get("top_k", defaults.top_k)),
        "top_p": float(options.get("top_p", defaults.top_p)),
        "min_p": float(options.get("min_p", defaults.min_p)),
        "top_n_sigma": -1.0, "xtc_probability": 0.0, "xtc_threshold": 0.1, "typical_p": 1.0,
        "repeat_last_n": defaults.repeat_last_n if repeat_last_n is None else repeat_last_n,
        "repeat_penalty": float(options.get("repeat_penalty", defaults.repeat_penalty)),
        "presence_penalty": float(options.get("presence_penalty", defaults.presence_penalty)),
        "frequency_penalty": float(options.get("frequency_penalty", defaults.frequency_penalty)),
        "dry_multiplier": 0.0, "mirostat": 0,
        "stop": list(stops),
        "max_tokens": -1 if n_predict is None else n_predict, "n_predict": -1 if n_predict is None else n_predict,
        "ignore_eos": ignore_eos, "stream": stream,
        # JSON has no -inf: llama-server writes a banned token's bias as the lowest float
        "logit_bias": [{"bias": b if math.isfinite(b) else -3.4028234663852886e38, "token": int(t)}
                       for t, b in bias.items()],
        "n_probs": n_probs, "min_keep": 0,
        "grammar": grammar if isinstance(grammar, str) else "",
        "samplers": list(SAMPLERS), "post_sampling_probs": False,
    }
    if json_schema is not None:
        settings["json_schema"] = json_schema
    return settings


# ---- the routes ------------------------------------------------------------------------------------
#: the fields each small endpoint takes (server-context.cpp, post_tokenize and the others)
_TOKENIZE_FIELDS = {"content", "add_special", "parse_special", "with_pieces"}
_DETOKENIZE_FIELDS = {"tokens"}
_TEMPLATE_FIELDS = {"messages", "tools", "chat_template_kwargs", "add_generation_prompt", "model", "reasoning_effort"}


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise InvalidRequestError(f"{name}: expected a boolean, got {type(value).__name__}", name)
    return value


def _unknown(body: Mapping[str, Any], known: Union[set[str], frozenset[str]]) -> None:
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise InvalidRequestError(f"unknown field {unknown[0]!r} (this endpoint takes {', '.join(sorted(known))})",
                                  unknown[0])


def routes(server: "_Server", slots_endpoint: bool = True) -> list[Route]:
    """llama-server's endpoints over ``server`` (the app's `_Server`)."""
    from .app import _accepted_fields

    model = server.model
    completion_fields = _accepted_fields(create_completion) | {"cache_prompt"}

    async def small(request: Request, endpoint: str, answer: Callable[[dict[str, Any]], Any]) -> Response:
        body = await server.read_json(request, LLAMA)
        if isinstance(body, Response):
            server.metrics.count_request(endpoint, body.status_code)
            return body
        try:  # on a thread: a long text to tokenize must not hold up the event loop's streams
            result = await asyncio.to_thread(answer, body)
        except (InvalidRequestError, TypeError, ValueError) as exc:
            server.metrics.count_request(endpoint, 400)
            return _error(400, str(exc))
        server.metrics.count_request(endpoint, 200)
        return JSONResponse(result)

    def tokenize(body: dict[str, Any]) -> dict[str, Any]:
        _unknown(body, _TOKENIZE_FIELDS)
        if "content" not in body:
            return {"tokens": []}
        ids = prompt_ids(model, body["content"], _flag(body, "add_special", False),
                         _flag(body, "parse_special", True), "content")
        if not _flag(body, "with_pieces", False):
            return {"tokens": ids}
        out = []
        for token in ids:
            piece = bytes(model.tokenizer.token_to_piece(token))
            try:
                shown: Any = piece.decode("utf-8")
            except UnicodeDecodeError:  # part of a character: its bytes, as llama-server sends them
                shown = list(piece)
            out.append({"id": token, "piece": shown})
        return {"tokens": out}

    def detokenize(body: dict[str, Any]) -> dict[str, Any]:
        _unknown(body, _DETOKENIZE_FIELDS)
        tokens = body.get("tokens", [])
        vocab = int(model.engine.vocab_size)
        if not isinstance(tokens, list) or not all(api._is_int(t) for t in tokens):
            raise InvalidRequestError("tokens: expected a list of token ids", "tokens")
        bad = [t for t in tokens if not 0 <= t < vocab]
        if bad:
            raise InvalidRequestError(f"tokens: {bad[0]} is outside the vocabulary [0, {vocab})", "tokens")
        pieces = b"".join(bytes(model.tokenizer.token_to_piece(t)) for t in tokens)
        return {"content": pieces.decode("utf-8", errors="replace")}

    def apply_template(body: dict[str, Any]) -> dict[str, Any]:
        from ..chat.session import chat_of

        _unknown(body, _TEMPLATE_FIELDS)
        messages = api._check_messages(body.get("messages"))
        tools = api._check_tools(body.get("tools"), None)
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise InvalidRequestError("chat_template_kwargs: expected an object", "chat_template_kwargs")
        kwargs = api._with_reasoning_effort(kwargs, body.get("reasoning_effort")) or {}
        prompt = chat_of(model).render(messages, _flag(body, "add_generation_prompt", True), tools, **kwargs)
        return {"prompt": prompt}

    async def native(request: Request, endpoint: str, call: Callable[..., Any], fields: frozenset[str],
                     refusal: Callable[[dict[str, Any]], Optional[Response]]) -> Response:
        """/completion and /infill: the body's fields checked (``refusal`` first: an error
        response, or None), the server's sampling defaults, the run on a slot."""
        body = await server.read_json(request, LLAMA)
        if isinstance(body, Response):
            server.metrics.count_request(endpoint, body.status_code)
            return body
        body.pop("model", None)
        try:
            refused = refusal(body)
            if refused is not None:
                server.metrics.count_request(endpoint, refused.status_code)
                return refused
            _unknown(body, fields)
            cache_prompt = _flag(body, "cache_prompt", True)
        except InvalidRequestError as exc:
            server.metrics.count_request(endpoint, 400)
            return _error(400, str(exc))
        body.pop("cache_prompt", None)
        server.add_sampling_defaults(body, create_completion)
        try:
            limit = reply_limit(body)
        except InvalidRequestError:
            limit = None  # create_completion refuses it, in the same shape as its other errors
        return await server.run_completion(request, endpoint, call, body, cache_prompt=cache_prompt,
                                           reply_limit=limit, dialect=LLAMA)

    def needs_prompt(body: dict[str, Any]) -> None:
        if "prompt" not in body:
            raise InvalidRequestError('"prompt" is required', "prompt")

    async def completion(request: Request) -> Response:
        return await native(request, "/completion", create_completion, completion_fields, needs_prompt)

    infill_fields = completion_fields | _accepted_fields(create_infill) - {"server_n_predict", "spm_infill"}

    def infill_refusal(body: dict[str, Any]) -> Optional[Response]:
        from ..infill import InfillUnsupportedError, fim_ids

        try:
            fim_ids(model.tokenizer)
        except InfillUnsupportedError as exc:
            return _error(501, str(exc))  # llama-server's answer to a model without FIM tokens
        # the server's -n bounds the extra files' room, as llama-server's params.n_predict
        body["server_n_predict"] = server.sampling_defaults.get("n_predict", -1)
        return None

    async def infill(request: Request) -> Response:
        return await native(request, "/infill", create_infill, infill_fields | {"server_n_predict"}, infill_refusal)

    async def props(request: Request) -> Response:
        return JSONResponse(properties(server, slots_endpoint))

    async def slots(request: Request) -> Response:
        if not slots_endpoint:
            return _error(501, "This server does not support slots endpoint. Start it without --no-slots")
        scheduler = server.scheduler
        out = []
        for slot in scheduler.slots:
            out.append({"id": slot.index, "n_ctx": scheduler.n_ctx, "speculative": False,
                        "is_processing": slot.request is not None,
                        "n_prompt_tokens": len(slot.context.tokens)})
        if request.query_params.get("fail_on_no_slot") and all(s["is_processing"] for s in out):
            return _error(503, "no slot available")
        return JSONResponse(out)

    def post(path: str, answer: Callable[[dict[str, Any]], Any]) -> Route:
        async def handler(request: Request) -> Response:
            return await small(request, path, answer)
        return Route(path, handler, methods=["POST"])

    return [
        Route("/completion", completion, methods=["POST"]),
        Route("/completions", completion, methods=["POST"]),
        Route("/infill", infill, methods=["POST"]),
        post("/tokenize", tokenize),
        post("/detokenize", detokenize),
        post("/apply-template", apply_template),
        Route("/props", props, methods=["GET"]),
        Route("/slots", slots, methods=["GET"]),
    ]


def properties(server: "_Server", slots_endpoint: bool) -> dict[str, Any]:
    """``GET /props``: the fields of llama-server's (server-context.cpp, get_res_props)
    this server can fill."""
    from ..chat.session import chat_of

    model = server.model
    defaults = server.sampling_defaults
    options = {k: v for k, v in defaults.items() if k not in ("n_predict", "repeat_last_n")}
    settings = generation_settings(options, defaults.get("n_predict"), [], False, 0, False, None, None,
                                   repeat_last_n=defaults.get("repeat_last_n", 64))
    for name in ("stop", "logit_bias", "grammar"):  # llama-server's /props leaves these out (to_json(true))
        settings.pop(name)
    chat = chat_of(model)
    path = getattr(model, "path", None)

    return {
        "default_generation_settings": {"params": settings, "n_ctx": server.scheduler.n_ctx},
        "total_slots": server.scheduler.n_slots,
        "model_alias": server.model_name,
        "model_path": "" if path is None else str(path),
        "modalities": {"vision": False, "video": False, "audio": False},
        "endpoint_slots": slots_endpoint, "endpoint_props": False, "endpoint_metrics": True,
        "chat_template": chat.source,
        "bos_token": chat.bos_token, "eos_token": chat.eos_token,
        "build_info": f"infer {__version__}",
        "is_sleeping": False,
    }
