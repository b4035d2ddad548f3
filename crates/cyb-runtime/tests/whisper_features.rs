//! The features a transcription decodes from against faster-whisper's own: the first window of
//! tests/fixtures/whisper/speech/hello.flac (mel frames 0..300 and the content length, from
//! tools/fixtures/make_whisper_transcripts.py).

use cyb_format::safetensors::SafetensorsFile;
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/whisper")
}

#[test]
fn mel_features_match_faster_whisper() {
    let r = SafetensorsFile::open(fixtures().join("fw_first_window.safetensors")).unwrap();
    let want = r.tensor("mel").unwrap().to_f32_vec().unwrap();
    let want_frames = r.tensor("mel").unwrap().dims()[1];
    let mut audio = cyb_media::load_16k_mono(&fixtures().join("speech/hello.flac")).unwrap();
    let content_frames = audio.len() / 160;
    assert_eq!(content_frames, 419);
    // faster-whisper pads one hop of silence and drops the frame it adds.
    audio.extend(std::iter::repeat_n(0.0, 160));
    let mel = cyb_media::LogMel::whisper(80).compute(&audio);
    let frames = mel.len() / 80;
    assert_eq!(frames, content_frames + 1);
    let mut worst = 0f32;
    for m in 0..80 {
        for t in 0..want_frames {
            worst = worst.max((mel[m * frames + t] - want[m * want_frames + t]).abs());
        }
    }
    assert!(worst <= 1e-4, "largest difference {worst:e}");
}
