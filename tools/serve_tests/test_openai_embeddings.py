"""The official `openai` client's embeddings API against `cyb-llm serve` with an encoder (the
tiny random-weight BERT of tests/fixtures/bert/bert) beside the tiny chat model.

Expected vectors come from tests/fixtures/bert/bert/reference.json (transformers' mean-pooled
last hidden states, made by tools/fixtures/make_bert_fixtures.py). The client asks for base64
unless told otherwise, so both encodings are exercised.
"""

import json
import os
from pathlib import Path

import openai
import pytest
from serving import serve

os.environ["NO_PROXY"] = "127.0.0.1,localhost"
os.environ["no_proxy"] = "127.0.0.1,localhost"

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
BIN = os.environ.get("CYB_LLM_BIN", str(ROOT / "target" / "debug" / "cyb-llm"))
REF = json.loads((FIXTURES / "bert" / "bert" / "reference.json").read_text())


@pytest.fixture(scope="module")
def server():
    yield from serve([BIN, "serve", FIXTURES / "bert" / "bert", FIXTURES / "tiny_chat" / "hf",
                      "--alias", "bert", "--alias", "tiny"], timeout=60)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0)


def close(got, want):
    scale = max(abs(x) for x in want)
    return len(got) == len(want) and all(abs(a - b) <= 1e-5 * scale for a, b in zip(got, want))


@pytest.mark.parametrize("encoding", [None, "float", "base64"])
def test_embeddings_equal_transformers(client, encoding):
    texts = [c["text"] for c in REF["texts"]]
    kwargs = {} if encoding is None else {"encoding_format": encoding}
    r = client.embeddings.create(model="bert", input=texts, **kwargs)
    assert r.model == "bert"
    assert [d.index for d in r.data] == [0, 1, 2]
    assert r.usage.prompt_tokens == sum(len(c["ids"]) for c in REF["texts"])
    for d, c in zip(r.data, REF["texts"]):
        emb = d.embedding
        if isinstance(emb, str):  # base64 asked explicitly: the client leaves it encoded
            import base64
            import struct
            raw = base64.b64decode(emb)
            emb = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        assert close(emb, c["mean"]), c["text"]


def test_wrong_kind_of_model_is_a_bad_request(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="bert", messages=[{"role": "user", "content": "hi"}])
    assert "embedding (encoder) model" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.embeddings.create(model="tiny", input="hello")
    assert "not an embedding model" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="bert", input="")
