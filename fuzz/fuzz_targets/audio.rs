//! Arbitrary bytes through cyb-media's audio input: as an upload (container probe, MP4 scan,
//! symphonia's demuxers and decoders, mixing and resampling) and as a stream (the streaming
//! WAV reader, or raw PCM). Each must return Ok or Err, never panic or abort; a panic caught
//! inside symphonia comes back as `DecoderPanic` and counts as a finding too.
#![no_main]

use cyb_media::{bytes_16k_mono, decode_bytes, stream_reader, AudioError};
use libfuzzer_sys::fuzz_target;

fn no_caught_panic<T>(r: Result<T, AudioError>) {
    if let Err(AudioError::DecoderPanic { reason, .. }) = r {
        panic!("symphonia panicked: {reason}");
    }
}

fuzz_target!(|data: &[u8]| {
    no_caught_panic(decode_bytes(data.to_vec(), Some("fuzz")));
    no_caught_panic(bytes_16k_mono(data.to_vec(), None));
    if let Ok(stream) = stream_reader(Box::new(std::io::Cursor::new(data.to_vec())), None) {
        for chunk in stream {
            if chunk.is_err() {
                break;
            }
        }
    }
});
