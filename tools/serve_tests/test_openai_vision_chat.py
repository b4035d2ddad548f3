"""The official `openai` client sends images in chat messages (`image_url` parts) to
`cyb-llm serve` with the tiny random-weight LLaVA and Idefics3 of tests/fixtures/vlm: the answer must
be transformers' greedy text for the same image and question
(tools/fixtures/make_vlm_fixtures.py), streamed or not, from a data URL or an allowed file://
path; bad images, too many images, images for a text-only model and unknown part types are 400s.
"""

import base64
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
LLAVA = FIXTURES / "vlm" / "llava"
IDEFICS3 = FIXTURES / "vlm" / "idefics3"
REF = json.loads((LLAVA / "reference.json").read_text())
REF_IDEFICS3 = json.loads((IDEFICS3 / "reference.json").read_text())
IMAGES = FIXTURES / "images"


@pytest.fixture(scope="module")
def server():
    yield from serve([BIN, "serve", LLAVA, FIXTURES / "tiny_chat" / "hf", IDEFICS3, "--alias", "llava",
                      "--alias", "tiny", "--alias", "idefics3", "--allow-image-dir", IMAGES])


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=120)


def data_url(name):
    path = FIXTURES / "vlm" / name if "/" in name else IMAGES / name
    data = base64.b64encode(path.read_bytes()).decode()
    return f"data:image/png;base64,{data}"


def messages(case, urls, ref=REF):
    """The reference case's messages with its image parts as image_url parts."""
    out = []
    urls = iter(urls)
    for m in ref[case]["messages"]:
        parts = []
        for p in m["content"]:
            if p["type"] == "image":
                parts.append({"type": "image_url", "image_url": {"url": next(urls)}})
            else:
                parts.append(p)
        out.append({"role": m["role"], "content": parts})
    return out


def ask(client, msgs, model="llava", **kw):
    return client.chat.completions.create(model=model, messages=msgs, temperature=0, max_tokens=32, **kw)


def test_models_say_which_take_images(client):
    models = {m.id: m.model_extra for m in client.models.list().data}
    assert models["llava"]["input_modalities"] == ["text", "image"]
    assert models["tiny"]["input_modalities"] == ["text"]


@pytest.mark.parametrize("case", ["one", "two"])
def test_answer_is_transformers_greedy_text(client, case):
    urls = [data_url(n) for n in REF["images"][case]]
    r = ask(client, messages(case, urls))
    assert r.choices[0].message.content == REF[case]["text"]
    assert r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(REF[case]["input_ids"])


@pytest.mark.parametrize("case", ["one", "two"])
def test_idefics3_answer_is_transformers_greedy_text(client, case):
    urls = [data_url(n) for n in REF_IDEFICS3["images"][case]]
    r = ask(client, messages(case, urls, REF_IDEFICS3), model="idefics3")
    assert r.choices[0].message.content == REF_IDEFICS3[case]["text"]
    assert r.usage.prompt_tokens == len(REF_IDEFICS3[case]["input_ids"])


def test_streamed_answer_is_the_same(client):
    urls = [data_url(n) for n in REF["images"]["one"]]
    chunks = ask(client, messages("one", urls), stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REF["one"]["text"]


def test_allowed_file_url(client):
    urls = [(IMAGES / n).resolve().as_uri() for n in REF["images"]["one"]]
    assert ask(client, messages("one", urls)).choices[0].message.content == REF["one"]["text"]


def bad_request(client, msgs, model="llava"):
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, msgs, model=model)
    return str(e.value)


def test_refusals(client):
    outside = (ROOT / "README.md").resolve().as_uri()
    assert "outside the image folder" in bad_request(client, messages("one", [outside]))
    garbage = "data:image/png;base64," + base64.b64encode(b"not an image at all").decode()
    assert "image 0" in bad_request(client, messages("one", [garbage]))
    assert "not fetched" in bad_request(client, messages("one", ["https://example.com/cat.png"]))
    many = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url("src_wide.png")}}] * 17
             + [{"type": "text", "text": "what ?"}]}]
    assert "at most 16" in bad_request(client, many)
    one = messages("one", [data_url("src_wide.png")])
    assert "takes no images" in bad_request(client, one, model="tiny")
    audio = [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]}]
    assert "input_audio" in bad_request(client, audio)
    # Text and an image, but the placeholder count comes from the template: a text-only
    # message to the vision model still works.
    r = client.chat.completions.create(model="llava", messages=[{"role": "user", "content": "what is this ?"}],
                                       max_tokens=4)
    assert r.choices[0].message.content is not None
