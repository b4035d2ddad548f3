//! Hostile and broken inputs give errors (naming the input and the reason), never panics,
//! aborts or memory in proportion to what a header claims.
//!
//! A panic inside symphonia would be caught and reported as `AudioError::DecoderPanic`; the
//! tests here fail on that variant too, so they show whether symphonia itself survives these
//! inputs rather than only that the catch works.

mod common;

use common::{fixture, s16le, wav_bytes};
use cyb_media::{bytes_16k_mono, decode_bytes, decode_file, load_16k_mono, AudioError};

/// Decodes `bytes` both whole and at 16 kHz; returns the first error, if any, and fails on a
/// caught decoder panic.
fn decode_both(bytes: &[u8], hint: Option<&str>) -> Result<usize, AudioError> {
    let whole = decode_bytes(bytes.to_vec(), hint);
    let at_16k = bytes_16k_mono(bytes.to_vec(), hint);
    for r in [whole.as_ref().err(), at_16k.as_ref().err()]
        .into_iter()
        .flatten()
    {
        assert!(
            !matches!(r, AudioError::DecoderPanic { .. }),
            "symphonia panicked: {r}"
        );
    }
    let a = whole?;
    at_16k?;
    Ok(a.samples.len())
}

fn tmp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cyb-media-{name}"));
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn an_empty_file_is_an_error() {
    let path = tmp_file("empty.wav", &[]);
    let err = decode_file(&path).unwrap_err().to_string();
    assert!(err.contains("empty") && err.contains("empty.wav"), "{err}");
    assert!(load_16k_mono(&path).is_err());
    assert!(decode_bytes(Vec::new(), Some("x.mp3"))
        .unwrap_err()
        .to_string()
        .contains("empty"));
    let missing = decode_file(std::path::Path::new("/nonexistent/cyb-media.wav")).unwrap_err();
    assert!(matches!(missing, AudioError::Io { .. }), "{missing}");
}

#[test]
fn random_bytes_are_an_error() {
    // A fixed xorshift stream: 64 KiB of noise, with and without a misleading name.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let bytes: Vec<u8> = (0..65_536)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 56) as u8
        })
        .collect();
    for hint in [
        None,
        Some("noise.bin"),
        Some("noise.mp3"),
        Some("noise.wav"),
    ] {
        let err = decode_both(&bytes, hint).expect_err("random bytes decoded");
        assert!(
            matches!(err, AudioError::Unsupported { .. }),
            "{hint:?}: {err}"
        );
    }
}

#[test]
fn unsupported_formats_say_what_they_are() {
    let m = common::manifest("containers.json");
    for entry in m["unsupported"].as_array().unwrap() {
        let name = entry["file"].as_str().unwrap();
        let err = decode_file(&fixture(name)).unwrap_err();
        eprintln!("{name} ({}): {err}", entry["what"]);
        assert!(
            matches!(err, AudioError::Unsupported { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(name), "{err}");
        assert!(load_16k_mono(&fixture(name)).is_err());
    }
    // The Opus one names its codec.
    let opus = decode_file(&fixture("unsupported_opus.ogg"))
        .unwrap_err()
        .to_string();
    assert!(opus.to_lowercase().contains("opus"), "{opus}");
}

#[test]
fn implausible_wav_parameters_are_rejected() {
    let data = s16le(&[0.1; 100]);
    let one_hz = wav_bytes(1, 1, 1, 16, data.len() as u32, &data);
    let err = decode_both(&one_hz, Some("one_hz.wav")).unwrap_err();
    assert!(matches!(err, AudioError::BadParameters { .. }), "{err}");
    assert!(err.to_string().contains("sample rate 1 Hz"), "{err}");

    let too_fast = wav_bytes(1, 1, 5_000_000, 16, data.len() as u32, &data);
    assert!(decode_both(&too_fast, None)
        .unwrap_err()
        .to_string()
        .contains("sample rate"));

    let no_channels = wav_bytes(1, 0, 16_000, 16, data.len() as u32, &data);
    let err = decode_both(&no_channels, Some("mute.wav")).unwrap_err();
    eprintln!("0 channels: {err}");
    assert!(err.to_string().contains("mute.wav"), "{err}");
}

#[test]
fn a_huge_declared_length_reads_only_what_is_there() {
    let data = s16le(&[0.25; 1000]);
    // What writers that stream leave behind: RIFF and data sizes unknown (all ones).
    let mut bytes = wav_bytes(1, 1, 16_000, 16, u32::MAX, &data);
    bytes[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode_both(&bytes, Some("piped.wav")).unwrap(), 1000);
    // A data chunk claiming gigabytes inside a RIFF claiming little: decoding what is there
    // or rejecting the contradiction are both fine; a large allocation or a panic is not.
    for declared in [u32::MAX - 1, 1 << 31, 1 << 30] {
        let bytes = wav_bytes(1, 1, 16_000, 16, declared, &data);
        match decode_both(&bytes, Some("long.wav")) {
            Ok(n) => assert_eq!(n, 1000, "declared {declared}"),
            Err(e) => eprintln!("declared {declared}: {e}"),
        }
    }
}

#[test]
fn an_mp4_table_claiming_billions_of_entries_is_rejected_before_decoding() {
    let mut bytes = std::fs::read(fixture("tone.m4a")).unwrap();
    let at = bytes.windows(4).position(|w| w == b"stts").unwrap();
    // stts: version/flags (4 bytes), then the entry count.
    bytes[at + 8..at + 12].copy_from_slice(&u32::MAX.to_be_bytes());
    let err = decode_both(&bytes, Some("evil.m4a")).unwrap_err();
    assert!(matches!(err, AudioError::Malformed { .. }), "{err}");
    assert!(err.to_string().contains("stts"), "{err}");
}

/// Decoded prefixes of truncated files: every cut either fails cleanly or gives no more
/// samples than the whole file (lossless ones: exactly a prefix of it).
#[test]
fn truncated_files_fail_or_decode_a_prefix() {
    for name in [
        "tone_s16.wav",
        "tone_f32.wav",
        "tone.flac",
        "tone.mp3",
        "tone.ogg",
        "tone.m4a",
    ] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        let full = decode_bytes(bytes.clone(), Some(name)).unwrap();
        let lossless =
            !name.ends_with(".mp3") && !name.ends_with(".ogg") && !name.ends_with(".m4a");
        let mut errors = 0;
        let cuts = [
            1,
            4,
            11,
            12,
            40,
            44,
            45,
            100,
            1000,
            bytes.len() / 3,
            bytes.len() / 2,
            bytes.len() - 1,
        ];
        for cut in cuts {
            let part = &bytes[..cut.min(bytes.len())];
            match decode_both(part, Some(name)) {
                Ok(_) => {
                    let a = decode_bytes(part.to_vec(), Some(name)).unwrap();
                    assert!(a.samples.len() <= full.samples.len(), "{name} cut at {cut}");
                    if lossless {
                        assert_eq!(
                            a.samples[..],
                            full.samples[..a.samples.len()],
                            "{name} cut at {cut}"
                        );
                    }
                }
                Err(_) => errors += 1,
            }
        }
        assert!(
            errors >= 3,
            "{name}: cutting inside the header should fail ({errors} errors)"
        );
    }
}

/// Seeded corruption: bytes overwritten with noise at random places in every container.
/// Anything but a caught decoder panic is acceptable (a damaged packet may just be skipped).
#[test]
fn corrupted_files_never_panic() {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for name in [
        "tone_s16.wav",
        "tone.flac",
        "tone.mp3",
        "tone.ogg",
        "tone.m4a",
    ] {
        let original = std::fs::read(fixture(name)).unwrap();
        let (mut ok, mut err) = (0, 0);
        for round in 0..40 {
            let mut bytes = original.clone();
            // Early rounds hit the header region, later ones anywhere.
            let span = if round < 20 {
                original.len().min(2048)
            } else {
                original.len()
            };
            for _ in 0..1 + round % 8 {
                let at = (next() as usize) % span;
                bytes[at] = next() as u8;
            }
            match decode_both(&bytes, Some(name)) {
                Ok(_) => ok += 1,
                Err(_) => err += 1,
            }
        }
        eprintln!("{name}: {ok} decoded, {err} rejected");
    }
}
