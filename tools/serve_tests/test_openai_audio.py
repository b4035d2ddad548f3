"""The official `openai` client's audio API (transcriptions, translations) against
`cyb-llm serve` with Whisper tiny.en (CTranslate2, from tools/fetch_whisper_tiny_en.sh; run.sh
passes its directory in CYB_WHISPER_TINY_EN_CT2), the tiny random-weight Whisper of
tests/fixtures/whisper_serve and the tiny chat model.

The audio is the Piper-spoken tests/fixtures/whisper/speech/weather.flac; tiny.en must give
faster-whisper's text for it (tests/fixtures/whisper/transcripts.json). Without tiny.en those
tests are skipped, except under CI (CI=true), where they fail; the random model's tests run
everywhere.
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
SPEECH = FIXTURES / "whisper" / "speech" / "weather.flac"
REF = json.loads((FIXTURES / "whisper" / "transcripts.json").read_text())["files"]["weather.flac"]
CACHE = Path(os.environ.get("CYB_CACHE", Path.home() / ".cache" / "cyb-llm"))
TINY_EN = Path(os.environ.get("CYB_WHISPER_TINY_EN_CT2", CACHE / "whisper-tiny.en-ct2"))
HAVE_TINY_EN = (TINY_EN / "model.bin").is_file()


@pytest.fixture(scope="module")
def server():
    models, aliases = [FIXTURES / "whisper_serve" / "model", FIXTURES / "tiny_chat" / "hf"], ["random", "tiny"]
    if HAVE_TINY_EN:
        models.append(TINY_EN)
        aliases.append("whisper-tiny.en")
    cmd = [BIN, "serve", *models]
    for a in aliases:
        cmd += ["--alias", a]
    yield from serve(cmd)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key="unused", max_retries=0, timeout=300)


@pytest.fixture
def tiny_en(client):
    if not HAVE_TINY_EN:
        msg = f"{TINY_EN} is missing: run tools/fetch_whisper_tiny_en.sh"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return "whisper-tiny.en"


def want_text():
    return REF["beam5"]["text"].strip()


def transcribe(client, model, **kwargs):
    with open(SPEECH, "rb") as f:
        return client.audio.transcriptions.create(model=model, file=f, **kwargs)


def test_models_lists_the_speech_models(client):
    ids = [m.id for m in client.models.list().data]
    assert "random" in ids and "tiny" in ids
    assert ("whisper-tiny.en" in ids) == HAVE_TINY_EN


def test_json_is_faster_whispers_text(client, tiny_en):
    r = transcribe(client, tiny_en)
    assert isinstance(r, openai.types.audio.Transcription)
    assert r.text == want_text()


def test_text_srt_and_vtt_are_strings(client, tiny_en):
    text = transcribe(client, tiny_en, response_format="text")
    assert isinstance(text, str) and text.strip() == want_text()
    srt = transcribe(client, tiny_en, response_format="srt")
    segments = REF["beam5"]["segments"]
    assert srt.startswith("1\n00:00:0")
    assert srt.count(" --> ") == len(segments)
    vtt = transcribe(client, tiny_en, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n")
    assert vtt.count(" --> ") == len(segments)


def test_verbose_json_has_segments_and_words(client, tiny_en):
    r = transcribe(client, tiny_en, response_format="verbose_json")
    assert isinstance(r, openai.types.audio.TranscriptionVerbose)
    assert r.text == want_text()
    assert r.language == "english"
    assert abs(r.duration - 7.836) < 0.01
    assert [s.text for s in r.segments] == [s["text"] for s in REF["beam5"]["segments"]]
    for s, w in zip(r.segments, REF["beam5"]["segments"]):
        assert abs(s.start - w["start"]) <= 0.1 and abs(s.end - w["end"]) <= 0.1
        assert s.tokens and s.avg_logprob < 0
    assert not r.words

    r = transcribe(client, tiny_en, response_format="verbose_json", timestamp_granularities=["word", "segment"])
    want_words = [w["word"].strip() for s in REF["beam5_words"]["segments"] for w in s["words"]]
    assert [w.word for w in r.words] == want_words
    assert all(w.start <= w.end for w in r.words)
    assert r.segments


def test_streaming_events(client, tiny_en):
    with open(SPEECH, "rb") as f:
        events = list(client.audio.transcriptions.create(model=tiny_en, file=f, stream=True))
    *deltas, done = events
    assert done.type == "transcript.text.done"
    assert done.text == want_text()
    assert deltas and all(d.type == "transcript.text.delta" for d in deltas)
    assert "".join(d.delta for d in deltas).strip() == want_text()


def test_translation_of_english_is_the_transcript(client, tiny_en):
    with open(SPEECH, "rb") as f:
        r = client.audio.translations.create(model=tiny_en, file=f)
    assert r.text == want_text()
    with open(SPEECH, "rb") as f:
        v = client.audio.translations.create(model=tiny_en, file=f, response_format="verbose_json")
    assert v.text == want_text()


def test_random_model_shapes(client):
    # Noise for text, but every form parses.
    r = transcribe(client, "random")
    assert isinstance(r.text, str)
    v = transcribe(client, "random", response_format="verbose_json")
    assert v.task == "transcribe" and v.language == "english"
    assert abs(v.duration - 7.836) < 0.01
    assert isinstance(transcribe(client, "random", response_format="srt"), str)
    with open(SPEECH, "rb") as f:
        t = client.audio.translations.create(model="random", file=f, response_format="text")
    assert isinstance(t, str)


def test_errors(client):
    with pytest.raises(openai.BadRequestError) as e:
        transcribe(client, "tiny")
    assert "not a speech recognition model" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        transcribe(client, "random", response_format="xml")
    assert e.value.param == "response_format"
    with pytest.raises(openai.BadRequestError) as e:
        client.audio.transcriptions.create(model="random", file=("notes.wav", b"RIFFjunk", "audio/wav"))
    with pytest.raises(openai.NotFoundError):
        transcribe(client, "whisper-9")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="random", messages=[{"role": "user", "content": "hi"}])
    assert "speech recognition" in str(e.value)
