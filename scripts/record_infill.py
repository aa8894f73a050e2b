"""Record llama-server's /infill prompts into tests/data/llama_cpp_infill.json, for
tests/test_infill.py.

    LLAMA_SERVER=/path/to/llama.cpp/build/bin/llama-server python scripts/record_infill.py

Writes tests/vocab_cases.py's "qwen-coder" model (random weights, Qwen2.5-Coder's FIM
tokens), serves it with llama-server (-c 4096, one slot, its default batch 2048 and
-n -1) and sends each case to /infill with n_predict 0.  The prompt llama-server built
comes back as text (special tokens written out); its /tokenize, reading special
tokens, gives the ids, and their count must equal the response's tokens_evaluated.
Then a few greedy /completion replies: their tokens and the text llama-server shows.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import vocab_cases  # noqa: E402

OUT = os.path.join(HERE, "..", "tests", "data", "llama_cpp_infill.json")
N_CTX, N_BATCH, N_PREDICT = 4096, 2048, -1
CASES = [
    dict(input_prefix="def add(a, b):\n    ", input_suffix="\n\nprint(add(1, 2))\n",
         input_extra=[{"filename": "util.py", "text": "x = 1\n"}, {"filename": "b.py", "text": "import util\n"}],
         prompt="return"),
    dict(input_prefix="for i in range(3):\n", input_suffix="", input_extra=[], prompt=""),
    dict(input_prefix="", input_suffix="    pass\n", input_extra=[{"text": "y = 2\n"}], prompt=""),
    # a prefix past 3/4 of the batch and a suffix past its last quarter; extra past the context's room
    dict(input_prefix="x = 1\n" * 400, input_suffix="y = 2\n" * 200, input_extra=[], prompt="q"),
    dict(input_prefix="def g():\n", input_suffix="", input_extra=[{"filename": "big.py", "text": "z = 3\n" * 500}],
         prompt=""),
]

#: /completion prompts whose greedy replies hold control tokens (random weights)
REPLY_PROMPTS = ["<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>",
                 "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "import os\n"]


def post(base: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"{path}: {exc.code} {exc.read().decode()}") from None


def main() -> None:
    server = os.environ.get("LLAMA_SERVER")
    if not server:
        sys.exit("set LLAMA_SERVER to llama.cpp's llama-server binary")
    with tempfile.TemporaryDirectory() as folder:
        path = vocab_cases.write("qwen-coder", os.path.join(folder, "coder.gguf"), weights=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        proc = subprocess.Popen([server, "-m", path, "-c", str(N_CTX), "-np", "1", "--port", str(port), "-t", "1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(server)))
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if json.loads(urllib.request.urlopen(base + "/health", timeout=2).read()).get("status") == "ok":
                        break
                except OSError:
                    pass
                time.sleep(0.1)
            cases = []
            for case in CASES:
                out = post(base, "/infill", dict(case, n_predict=0, cache_prompt=False))
                ids = post(base, "/tokenize", {"content": out["prompt"], "add_special": False,
                                               "parse_special": True})["tokens"]
                assert len(ids) == out["tokens_evaluated"], (len(ids), out["tokens_evaluated"])
                cases.append(dict(case, llama_server_prompt=out["prompt"], llama_server_prompt_ids=ids))
            # greedy replies: their tokens, and the text llama-server shows of them (control tokens as nothing)
            replies = []
            for prompt in REPLY_PROMPTS:
                out = post(base, "/completion", {"prompt": prompt, "n_predict": 16, "temperature": 0,
                                                 "return_tokens": True, "cache_prompt": False})
                replies.append({"prompt": prompt, "tokens": out["tokens"], "content": out["content"]})
        finally:
            proc.terminate()
            proc.wait()
    with open(OUT, "w") as f:
        json.dump({"n_ctx": N_CTX, "n_batch": N_BATCH, "n_predict": N_PREDICT,
                   "tokens": vocab_cases.tokens_of("qwen-coder"), "cases": cases, "replies": replies}, f, indent=1)
        f.write("\n")
    print(f"wrote {OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
