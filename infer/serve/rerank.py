"""llama-server's reranking endpoint: ``POST /v1/rerank`` (also ``/rerank``,
``/v1/reranking``, ``/reranking``), for a reranking model (an encoder with a
classification head; `infer.embeddings.rerank`).

Request (Jina's shape): ``{"query": str, "documents": [str, ...], "top_n": int}``;
response: ``{"model", "object": "list", "usage": {"prompt_tokens", "total_tokens"},
"results": [{"index", "relevance_score"}, ...]}``, best first, at most top_n.  A body
with ``texts`` instead of ``documents`` gets TEI's shape: the bare list of
``{"index", "score"}`` (with ``"text"`` if ``return_text``), as llama-server answers it
(tools/server/server-common.cpp, format_response_rerank).
"""
from __future__ import annotations

import asyncio
from typing import Any, Optional

from .. import api
from ..embeddings import rerank, rerank_tokens

PATHS = ("/v1/rerank", "/rerank", "/v1/reranking", "/reranking")
_FIELDS = {"query", "documents", "texts", "top_n", "return_text", "model"}


class RerankUnsupported(api.InvalidRequestError):
    """The loaded model does not rerank (llama-server: 501, "not_supported_error")."""


def create_rerank(model: Any, query: Any = None, documents: Any = None, texts: Any = None,
                  top_n: Optional[int] = None, return_text: bool = False,
                  model_name: Optional[str] = None) -> Any:
    """llama-server's rerank response for a parsed request body (see the module's docstring)."""
    if not getattr(model.engine, "can_rerank", False):
        raise RerankUnsupported("This server does not support reranking: the model is not a reranker "
                                "(an encoder with a classification head)", None)
    if not isinstance(query, str):
        raise api.InvalidRequestError("\"query\" must be provided" if query is None else
                                      "\"query\" must be a string", "query")
    tei = texts is not None
    docs = texts if tei else documents
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise api.InvalidRequestError("\"documents\" must be a non-empty string array", "documents")
    if top_n is None:
        top_n = len(docs)
    if isinstance(top_n, bool) or not isinstance(top_n, int):
        raise api.InvalidRequestError("top_n: expected an integer", "top_n")
    if not isinstance(return_text, bool):
        raise api.InvalidRequestError("return_text: expected a boolean", "return_text")
    try:
        scores = rerank(model, query, docs)
    except ValueError as exc:  # a pair longer than the model's context, a lone surrogate
        raise api.InvalidRequestError(str(exc), "documents") from None
    n_tokens = sum(len(rerank_tokens(model, query, d)) for d in docs)
    label = "score" if tei else "relevance_score"
    results = []
    for i, score in enumerate(scores):
        item: dict[str, Any] = {"index": i, label: score}
        if tei and return_text:
            item["text"] = docs[i]
        results.append(item)
    results.sort(key=lambda r: -r[label])  # stable: ties keep the documents' order
    results = results[:max(top_n, 0)]
    if tei:
        return results
    return {"model": model_name or api._model_name(model, None), "object": "list",
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}, "results": results}


def routes(server: Any) -> list[Any]:
    """The rerank routes of `infer.serve.app`'s server."""
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from .app import _classify, error_body

    async def handle(request: Request) -> Response:
        body = await server.read_json(request)
        if isinstance(body, Response):
            server.metrics.count_request("/v1/rerank", body.status_code)
            return body
        unknown = sorted(set(body) - _FIELDS)
        status, result = 200, None
        if unknown:
            status, result = 400, error_body(f"unrecognized request argument supplied: {unknown[0]}",
                                             param=unknown[0])
        else:
            name = body.pop("model", None)
            try:
                result = await asyncio.to_thread(create_rerank, server.model, model_name=name or server.model_name,
                                                 **body)
            except RerankUnsupported as exc:
                status, result = 501, error_body(str(exc), "not_supported_error")
            except BaseException as exc:
                status, result = _classify(exc)
        server.metrics.count_request("/v1/rerank", status)
        return JSONResponse(result, status_code=status)

    return [Route(path, handle, methods=["POST"]) for path in PATHS]
