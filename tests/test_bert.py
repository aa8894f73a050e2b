"""BERT-family encoders (GGUF ``bert``, ``nomic-bert``), the WordPiece tokenizer and
reranking, on tests/tiny_bert.py's files, against:

* llama.cpp's own token ids, detokenized texts (tests/data/llama_cpp_bert_tokens.json),
  pooled embeddings, per-token states and rerank scores (tests/data/llama_cpp_bert.npz;
  scripts/record_bert_embeddings.py, tests/data/README.md);
* the `tokenizers` library's BertWordPieceTokenizer on the same vocabulary;
* the float64 numpy forward pass of tests/reference/numpy_bert.py;
* the official `openai` client against `infer serve`'s /v1/embeddings, and the
  request/response shapes of llama-server's /v1/rerank.
"""
import json
import os

import numpy as np
import pytest
import tiny_bert as tb
from family_checks import cosine, cosines

import infer
from infer import api
from infer.runtime import ContextOverflowError, UnsupportedModelError
from infer.tokenizer import Tokenizer

DATA = os.path.join(os.path.dirname(__file__), "data")
#: infer's pooled vectors against llama.cpp's (the task's bar; measured: >= 0.99999)
MIN_COS = 0.9999
#: the files llama.cpp's embeddings were recorded on: name -> (tiny_bert entry, matrix type)
FILES = {name: (name, "f16") for name in tb.BERT}
FILES.update({"bert@q8_0": ("bert", "q8_0"), "bert@f32": ("bert", "f32"), "nomic-bert@q8_0": ("nomic-bert", "q8_0")})


@pytest.fixture(scope="module")
def recorded():
    return np.load(os.path.join(DATA, "llama_cpp_bert.npz"))


@pytest.fixture(scope="module")
def tokens_record():
    with open(os.path.join(DATA, "llama_cpp_bert_tokens.json"), encoding="utf-8") as f:
        return json.load(f)


_models = {}


@pytest.fixture(scope="module")
def load(tmp_path_factory):
    """load(name) -> the model of FILES[name] (written and loaded once per module)."""
    folder = tmp_path_factory.mktemp("bert")

    def get(name):
        if name not in _models:
            entry, kind = FILES[name]
            path = tb.write(entry, str(folder / f"{name}.gguf"), matrix_type=kind)
            _models[name] = (infer.load(path), tb.sha256(path))
        return _models[name]

    yield get
    for model, _ in _models.values():
        model.close()
    _models.clear()


# ---- the tokenizer ---------------------------------------------------------------------------
def test_wordpiece_ids_and_text_are_llama_cpps(load, tokens_record):
    model, sha = load("bert")
    assert sha == tokens_record["sha256"], "tiny_bert's file changed: record again"
    tok = model.tokenizer
    for case in tokens_record["cases"]:
        text = case["text"]
        assert tok.encode(text) == case["ids"], text
        assert tok.encode(text, parse_special=True) == case["ids_parse_special"], text
        assert tok.decode(case["ids"]) == case["detokenized"], text
        assert tok.decode(case["ids"], skip_special=True) == case["detokenized_no_special"], text


def test_wordpiece_ids_are_the_tokenizers_librarys(load):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.BertWordPieceTokenizer({t: i for i, t in enumerate(tb.HF_VOCAB)}, lowercase=True,
                                           strip_accents=True)
    tok = load("bert")[0].tokenizer
    compared = [t for t in tb.TOKENIZE_TEXTS if t not in tb.NOT_LIKE_HF]
    for text in compared:
        assert tok.encode(text) == hf.encode(text).ids, text
    # where they part: llama.cpp (and infer) cut a 150-letter word into pieces, BERT gives [UNK]
    long_word = tok.encode("x" * 150)
    assert hf.encode("x" * 150).ids == [101, 100, 102] and len(long_word) > 3


def test_wordpiece_unknown_words_and_empty_text(load):
    tok = load("bert")[0].tokenizer
    unk, cls, sep = 100, 101, 102
    assert tok.encode("") == [cls, sep]
    assert tok.encode("", add_special=False) == []
    assert tok.encode("ʘʘ cat", add_special=False) == [unk, tok.vocab.token_id("\u2581cat")]
    with pytest.raises(ValueError, match=r"\[UNK\]"):      # no [UNK] to give unknown words
        Tokenizer.from_metadata({"tokenizer.ggml.model": "bert", "tokenizer.ggml.tokens": ["[CLS]", "\u2581a"],
                                 "tokenizer.ggml.bos_token_id": 0})
    # greedy longest match first: "cats" is a word, "catsat" is "cats" + "at" (not "cat" + "sat")
    assert tok.encode("catsat", add_special=False) == [tok.vocab.token_id("\u2581cats"), tok.vocab.token_id("at")]


# ---- embeddings against llama.cpp and the float64 reference ---------------------------------
@pytest.mark.parametrize("name", [n for n in FILES if tb.BERT[FILES[n][0]].pooling != 4])
def test_pooled_embeddings_match_llama_cpp(load, recorded, name):
    model, sha = load(name)
    assert sha == str(recorded[f"{name}/sha256"]), "tiny_bert's file changed: record again"
    theirs = recorded[f"{name}/pooled"]
    for i, text in enumerate(tb.TEXTS):
        assert model.tokenizer.encode(text) == recorded[f"{name}/tokens_{i}"].tolist()
    ours = model.embed(list(tb.TEXTS), normalize=False)     # the file's pooling
    assert min(cosines(ours, theirs)) >= MIN_COS
    unit = model.embed(list(tb.TEXTS))                       # llama-server's /v1/embeddings: L2-normalised
    np.testing.assert_allclose(unit, theirs / np.linalg.norm(theirs, axis=1, keepdims=True), atol=3e-3)
    ids = recorded[f"{name}/tokens_0"]
    hidden = model.create_context(n_ctx=len(ids)).prefill(ids, hidden_states=True)
    assert min(cosines(hidden, recorded[f"{name}/hidden"])) >= MIN_COS


@pytest.mark.parametrize("name,source,ftype", [("bert@llama-q4_k_m", "bert", "q4_k_m"),
                                               ("nomic-bert@llama-q5_k_m", "nomic-bert", "q5_k_m")])
def test_quantized_files_match_llama_cpp(tmp_path, recorded, name, source, ftype):
    """What llama-quantize makes of the F16 files (Q5_0 / Q5_1 / Q8_0 matrices: 64 columns
    take no K-quant; position_embd and token_types stay as they are): `infer quantize`
    chooses the same types, and the embeddings match llama.cpp's on its own file."""
    from infer.gguf import GGUFFile
    from infer.quantize import quantize_file

    src = tb.write(source, str(tmp_path / "f16.gguf"))
    dst = str(tmp_path / "q.gguf")
    quantize_file(src, dst, ftype)
    with GGUFFile(dst) as f:
        ours = sorted(f"{t.name}={t.dtype.name}" for t in f.tensors.values())
    assert ours == sorted(str(x) for x in recorded[f"{name}/tensor_types"])
    with infer.load(dst) as model:
        got = model.embed(list(tb.TEXTS), normalize=False)
    assert min(cosines(got, recorded[f"{name}/pooled"])) >= MIN_COS


@pytest.mark.parametrize("name", ["bert", "bert-cls", "nomic-bert"])
def test_pooled_embeddings_match_the_float64_reference(load, name):
    from reference.numpy_bert import Encoder

    model, _ = load(name)
    ref = Encoder(model.path)
    for text in tb.TEXTS[:3]:
        ids = model.tokenizer.encode(text)
        assert cosine(model.embed([ids], normalize=False)[0], ref.pooled(ids)) >= MIN_COS


def test_pooling_defaults_to_the_files_and_an_explicit_one_overrides(load):
    model = load("bert-cls")[0]                      # pooling_type 2: CLS
    ids = model.tokenizer.encode(tb.TEXTS[1])
    hidden = model.create_context(n_ctx=len(ids)).prefill(ids, hidden_states=True).astype(np.float64)
    np.testing.assert_allclose(model.embed(tb.TEXTS[1], normalize=False), hidden[0], rtol=1e-6)
    np.testing.assert_allclose(model.embed(tb.TEXTS[1], pooling="mean", normalize=False), hidden.mean(0),
                               rtol=1e-5, atol=1e-6)


# ---- reranking -------------------------------------------------------------------------------
def test_rerank_scores_match_llama_cpp(load, recorded):
    from infer.embeddings import rerank_tokens

    model, sha = load("bert-rank")
    assert sha == str(recorded["bert-rank/sha256"])
    docs = list(tb.RANK_DOCUMENTS)
    for i, doc in enumerate(docs):    # [CLS] query [SEP] document, as llama-server formats it
        assert rerank_tokens(model, tb.RANK_QUERY, doc) == recorded[f"bert-rank/rank_tokens_{i}"].tolist()
    from reference.numpy_bert import Encoder

    ref = Encoder(model.path)
    theirs = recorded["bert-rank/rank_scores"]
    ours = model.rerank(tb.RANK_QUERY, docs)
    np.testing.assert_allclose(ours, theirs, atol=5e-3)
    np.testing.assert_allclose(ours, [ref.pooled(rerank_tokens(model, tb.RANK_QUERY, d))[0] for d in docs],
                               atol=5e-3)
    assert list(np.argsort(ours)) == list(np.argsort(theirs))

    from infer.serve.rerank import create_rerank

    jina = create_rerank(model, query=tb.RANK_QUERY, documents=docs, top_n=2)
    assert jina["object"] == "list" and len(jina["results"]) == 2
    best = list(np.argsort(theirs)[::-1][:2])
    assert [r["index"] for r in jina["results"]] == best
    assert jina["usage"]["prompt_tokens"] == sum(len(recorded[f"bert-rank/rank_tokens_{i}"]) for i in range(4))
    tei = create_rerank(model, query=tb.RANK_QUERY, texts=docs, return_text=True)
    assert [r["index"] for r in tei] == list(np.argsort(theirs)[::-1]) and tei[0]["text"] == docs[tei[0]["index"]]


def test_a_reranker_without_pooling_type_and_a_mean_pooled_head(tmp_path, load, recorded):
    """The converter writes no pooling_type for a BERT cross-encoder (llama-server runs it
    with --reranking): its head makes it a reranker.  classifier.pooling_type 1 feeds the
    head the mean of the states instead of the first (llama.cpp's build_pooling)."""
    import dataclasses

    from infer.embeddings import rerank_tokens
    from reference.numpy_bert import Encoder

    docs = list(tb.RANK_DOCUMENTS)
    plain = dataclasses.replace(tb.BERT["bert-rank"], pooling=None)
    with infer.load(tb.write("bert-rank", str(tmp_path / "a.gguf"), tiny=plain)) as model:
        assert model.engine.pooling == "rank"
        np.testing.assert_allclose(model.rerank(tb.RANK_QUERY, docs), recorded["bert-rank/rank_scores"], atol=5e-3)
    mean = dataclasses.replace(plain, extra={"bert.classifier.pooling_type": 1})
    path = tb.write("bert-rank", str(tmp_path / "b.gguf"), tiny=mean)
    ref = Encoder(path)
    with infer.load(path) as model:
        want = [ref.pooled(rerank_tokens(model, tb.RANK_QUERY, d))[0] for d in docs]
        np.testing.assert_allclose(model.rerank(tb.RANK_QUERY, docs), want, atol=5e-3)
        assert np.abs(np.array(want) - recorded["bert-rank/rank_scores"]).max() > 0.05  # it reads other states


# ---- misuse and hostile files ----------------------------------------------------------------
def test_misuse_gets_clear_errors(load):
    model = load("bert")[0]
    with pytest.raises(ContextOverflowError, match="input is too large"):
        model.embed(["ok", "cat " * 80])                 # 80 words > the 64-token trained context
    with pytest.raises(api.InvalidRequestError, match="input is too large"):
        model.create_embedding(["cat " * 80])
    with pytest.raises(api.InvalidRequestError):
        model.create_embedding([])
    with pytest.raises(ValueError, match="embedding model"):
        "".join(infer.generate(model, "a cat", max_tokens=4))
    with pytest.raises(ValueError, match="does not rerank"):
        model.rerank("q", ["d"])
    rank = load("bert-rank")[0]
    with pytest.raises(ValueError, match="reranking model"):
        rank.embed("a cat")
    from infer.serve.rerank import RerankUnsupported, create_rerank

    with pytest.raises(RerankUnsupported):
        create_rerank(model, query="q", documents=["d"])
    with pytest.raises(api.InvalidRequestError, match="non-empty"):
        create_rerank(rank, query="q", documents=[])
    with pytest.raises(api.InvalidRequestError, match="input is too large"):
        create_rerank(rank, query="q", documents=["cat " * 80])


def test_a_closed_model_says_so(tmp_path):
    from infer.runtime import ModelClosedError

    model = infer.load(tb.write("bert-rank", str(tmp_path / "m.gguf")))
    model.close()
    with pytest.raises(ModelClosedError):
        model.embed("a cat", pooling="mean")
    with pytest.raises(ModelClosedError):
        model.rerank("q", ["d"])


@pytest.mark.parametrize("drop", ["blk.1.ffn_down.weight", "token_embd_norm.bias", "position_embd.weight"])
def test_a_file_missing_a_tensor_is_refused(tmp_path, drop):
    path = tb.write("bert", str(tmp_path / "m.gguf"), drop=(drop,))
    with pytest.raises(UnsupportedModelError, match=drop.replace(".", r"\.")):
        infer.load(path)


def test_a_sentencepiece_reranker_is_refused(tmp_path):
    """bge-reranker-v2-m3 and other XLM-RoBERTa files: arch bert with a "t5" (unigram) vocabulary."""
    import dataclasses

    t5 = dataclasses.replace(tb.BERT["bert-rank"], extra={"tokenizer.ggml.model": "t5"})
    with pytest.raises(UnsupportedModelError, match="'t5'"):
        infer.load(tb.write("bert-rank", str(tmp_path / "t5.gguf"), tiny=t5))


def test_a_file_with_tensors_the_encoder_does_not_use_is_refused(tmp_path):
    path = tb.write("nomic-bert", str(tmp_path / "m.gguf"),
                    more_tensors={"blk.0.attn_q_norm.weight": np.ones(64, np.float32)})
    with pytest.raises(UnsupportedModelError, match="attn_q_norm"):
        infer.load(path)


# ---- the server ------------------------------------------------------------------------------
def test_serve_embeddings_and_rerank_over_http(load, recorded):
    pytest.importorskip("openai")
    pytest.importorskip("uvicorn")
    from test_serve import app_server, client, request

    from infer.serve.app import create_app

    model = load("nomic-bert")[0]
    theirs = recorded["nomic-bert/pooled"]
    with app_server(create_app(model, parallel=1)) as base:
        result = client(base).embeddings.create(model="m", input=list(tb.TEXTS[:2]))
        got = np.array([d.embedding for d in result.data])
        assert min(cosines(got, theirs[:2])) >= MIN_COS
        assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
        status, _, body = request(base, "POST", "/v1/embeddings", {"input": ["cat " * 80]})
        assert status == 400 and "input is too large" in body["error"]["message"]
        status, _, body = request(base, "POST", "/v1/rerank", {"query": "q", "documents": ["d"]})
        assert status == 501
        status, _, tags = request(base, "GET", "/api/tags")        # ollama's /api/embed: the same vectors
        status, _, body = request(base, "POST", "/api/embed", {"model": tags["models"][0]["name"],
                                                                "input": list(tb.TEXTS[:2])})
        assert status == 200 and min(cosines(body["embeddings"], theirs[:2])) >= MIN_COS
    rank = load("bert-rank")[0]
    with app_server(create_app(rank, parallel=1)) as base:
        status, _, body = request(base, "POST", "/rerank", {"query": tb.RANK_QUERY,
                                                             "documents": list(tb.RANK_DOCUMENTS), "top_n": 3})
        assert status == 200 and len(body["results"]) == 3
        np.testing.assert_allclose([r["relevance_score"] for r in body["results"]],
                                   np.sort(recorded["bert-rank/rank_scores"])[::-1][:3], atol=5e-3)
        status, _, body = request(base, "POST", "/v1/rerank", {"documents": ["d"]})
        assert status == 400 and "query" in body["error"]["message"]


# ---- the command line ------------------------------------------------------------------------
def test_cli_embeds_shows_and_refuses_to_generate(load, capsys):
    from infer.cli import main

    model = load("nomic-bert")[0]
    assert main(["embed", "-m", model.path, tb.TEXTS[0], tb.TEXTS[1]]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    np.testing.assert_allclose(rows, model.embed(list(tb.TEXTS[:2])), atol=1e-6)
    assert main(["info", model.path]) == 0
    assert "pooling mean" in capsys.readouterr().out
    rank = load("bert-rank")[0]
    assert main(["info", rank.path]) == 0
    assert "reranking" in capsys.readouterr().out
    for command in (["generate", "-m", model.path, "a cat"], ["chat", "-m", model.path]):
        assert main(command) == 1
        assert "is an embedding model" in capsys.readouterr().err


def test_ollama_lists_an_encoder_as_embedding_only(load):
    from infer.serve.ollama import capabilities

    assert capabilities(load("nomic-bert")[0]) == ["embedding"]  # ollama's /api/show for nomic-embed-text
