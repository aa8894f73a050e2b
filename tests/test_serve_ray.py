"""infer serve on Ray Serve: a local Ray instance, 2 replicas of 1 thread each,
answering through Ray's HTTP proxy what the library answers in this process."""
import concurrent.futures
import socket
import time

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install \"infer-llm[ray]\")")
serve = pytest.importorskip("ray.serve", reason="Ray Serve is not installed (pip install \"ray[serve]\")")
openai = pytest.importorskip("openai")

from infer.serve.ray_deployment import build  # noqa: E402

# A Ray cluster takes ~1.5 min to start and serve on 2 cores: .ci/run's slow pass.
pytestmark = pytest.mark.slow("starts a Ray cluster, ~1.5 min")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_base():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(build(replicas=2, threads=1, parallel=2, ctx_size=512), name="infer", route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_two_replicas_answer_like_the_library(ray_base):
    import infer

    status = serve.status().applications["infer"]
    replicas = status.deployments["infer"].replica_states
    assert replicas.get("RUNNING") == 2, replicas
    client = openai.OpenAI(base_url=ray_base + "/v1", api_key="none", max_retries=0, timeout=300)
    prompts = [[{"role": "user", "content": f"Name a color, number {i}."}] for i in range(4)]
    with infer.load() as model:
        expected = [model.create_chat_completion(m, max_tokens=12, temperature=0)["choices"][0]["message"]["content"]
                    for m in prompts]

    def ask(messages):
        out = client.chat.completions.create(model="any", messages=messages, max_tokens=12, temperature=0,
                                             extra_body={"cache_prompt": False})
        return out.choices[0].message.content

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(ask, prompts)) == expected
    assert time.monotonic() - t0 < 300
    (entry,) = client.models.list().data
    assert entry.id == "SmolLM2-135M-Instruct.Q4_1.gguf"
