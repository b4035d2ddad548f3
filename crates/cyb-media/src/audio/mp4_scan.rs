//! A pass over an MP4/M4A box tree before symphonia reads it: checks that its sample tables
//! fit in their boxes, and reads the one fact symphonia ignores that a decode needs (the
//! edit list's priming).
//!
//! Tables: symphonia's isomp4 reader reserves memory for as many table entries as an atom's
//! count field says (`stts`, `stsc`, `stsz`, `stco`, `co64`) before reading them: a 1 KiB file
//! can ask for 32 GiB and abort the process. Here every such atom anywhere in the box tree
//! must hold the bytes its count needs. Box sizes past the end of the input are clamped to it
//! (a truncated download is for the decoder to judge); only the counts are enforced.
//!
//! Priming: AAC encoders put about 1024 frames of decoder warm-up before the audio, and the
//! first audio track's edit list (`elst`) says where the audio starts (its first non-empty
//! edit's media time, in the track's `mdhd` timescale). Players, ffmpeg among them, skip that
//! much; symphonia does not, so [`super::container::ContainerDecoder`] does.
//!
//! symphonia's probe finds a container by scanning up to 1 MiB for its marker, so every
//! `ftyp` in the first 1 MiB (after an ID3v2 tag, which the probe skips) is treated as the
//! start of an MP4; the priming is taken from the first.

use std::io::{self, Read, Seek, SeekFrom};

use super::AudioError;

/// How far symphonia's probe scans for a format marker.
const PROBE_WINDOW: u64 = 1024 * 1024;
/// Box nesting deeper than this is not followed (real files nest about 8 deep).
const MAX_DEPTH: u32 = 16;
/// `ftyp` occurrences checked; real files have one.
const MAX_STARTS: usize = 32;

/// Where the first audio track's audio starts: `media_time` units of `1 / timescale` s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Priming {
    pub media_time: u64,
    pub timescale: u32,
}

impl Priming {
    /// The priming in frames at `sample_rate`.
    pub(crate) fn frames(&self, sample_rate: u32) -> u64 {
        let frames = u128::from(self.media_time) * u128::from(sample_rate)
            / u128::from(self.timescale.max(1));
        u64::try_from(frames).unwrap_or(u64::MAX)
    }
}

/// What one `trak` box says, as far as this pass cares.
#[derive(Default)]
struct Track {
    handler: Option<[u8; 4]>,
    timescale: Option<u32>,
    media_time: Option<u64>,
}

struct Scan<'a, R> {
    r: &'a mut R,
    file: &'a str,
    track: Option<Track>,
    priming: Option<Priming>,
    audio_track_seen: bool,
}

/// Checks `r` (read from its start) as described in the module doc and returns the first
/// audio track's priming, if it has an edit list. Inputs with no `ftyp` pass untouched.
/// Leaves `r` at its start.
pub(crate) fn scan_mp4<R: Read + Seek>(
    r: &mut R,
    file: &str,
) -> Result<Option<Priming>, AudioError> {
    let io = |source: io::Error| AudioError::Io {
        file: file.to_string(),
        source,
    };
    let len = r.seek(SeekFrom::End(0)).map_err(io)?;
    let skip = id3v2_len(r).map_err(io)?;
    r.seek(SeekFrom::Start(skip)).map_err(io)?;
    let mut window = Vec::new();
    r.by_ref()
        .take(PROBE_WINDOW + 16)
        .read_to_end(&mut window)
        .map_err(io)?;
    let starts = window
        .windows(4)
        .enumerate()
        .filter(|(i, w)| *i >= 4 && *w == b"ftyp")
        .map(|(i, _)| skip + i as u64 - 4)
        .take(MAX_STARTS)
        .collect::<Vec<_>>();
    let mut priming = None;
    for (n, &start) in starts.iter().enumerate() {
        let mut scan = Scan {
            r: &mut *r,
            file,
            track: None,
            priming: None,
            audio_track_seen: false,
        };
        scan.walk(start, len, 0)?;
        if n == 0 {
            priming = scan.priming;
        }
    }
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    Ok(priming)
}

/// The size of an ID3v2 tag at the start (header and footer included), 0 without one.
fn id3v2_len<R: Read + Seek>(r: &mut R) -> io::Result<u64> {
    r.seek(SeekFrom::Start(0))?;
    let mut h = [0u8; 10];
    if read_up_to(r, &mut h)? < h.len() || &h[..3] != b"ID3" {
        return Ok(0);
    }
    let size = h[6..10]
        .iter()
        .fold(0u64, |acc, b| (acc << 7) | u64::from(b & 0x7f));
    let footer = if h[5] & 0x10 != 0 { 10 } else { 0 };
    Ok(10 + size + footer)
}

impl<R: Read + Seek> Scan<'_, R> {
    fn io(&self, source: io::Error) -> AudioError {
        AudioError::Io {
            file: self.file.to_string(),
            source,
        }
    }

    /// Walks the boxes in `start..end`, descending into containers.
    fn walk(&mut self, start: u64, end: u64, depth: u32) -> Result<(), AudioError> {
        let mut pos = start;
        while end.saturating_sub(pos) >= 8 {
            let mut h = [0u8; 16];
            let got = self.read_at(pos, &mut h)?;
            if got < 8 {
                return Ok(());
            }
            let size32 = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
            let kind = [h[4], h[5], h[6], h[7]];
            let (header, size) = match size32 {
                0 => (8, end - pos),
                1 if got == 16 => {
                    let large =
                        u64::from_be_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
                    (16, large)
                }
                // Sizes below the header are symphonia's to reject; stop walking this level.
                1 => return Ok(()),
                n => (8, u64::from(n)),
            };
            if size < header {
                return Ok(());
            }
            let size = size.min(end - pos);
            let body = pos + header..pos + size;
            match &kind {
                b"trak" if depth < MAX_DEPTH => {
                    self.track = Some(Track::default());
                    self.walk(body.start, body.end, depth + 1)?;
                    self.end_track();
                }
                b"moov" | b"mdia" | b"minf" | b"stbl" | b"edts" | b"dinf" | b"mvex" | b"moof"
                | b"traf" | b"udta"
                    if depth < MAX_DEPTH =>
                {
                    self.walk(body.start, body.end, depth + 1)?;
                }
                b"stts" => self.check_table(body, 8, 8, 0, &kind)?,
                b"stsc" => self.check_table(body, 8, 12, 0, &kind)?,
                b"stco" => self.check_table(body, 8, 4, 0, &kind)?,
                b"co64" => self.check_table(body, 8, 8, 0, &kind)?,
                // stsz: version/flags, sample size, count; entries only when the size is 0.
                b"stsz" => self.check_table(body, 12, 4, 4, &kind)?,
                b"hdlr" => {
                    // version/flags, pre_defined, then the handler type.
                    let mut b = [0u8; 12];
                    if self.read_at(body.start, &mut b)? == 12 {
                        if let Some(t) = self.track.as_mut() {
                            t.handler = Some([b[8], b[9], b[10], b[11]]);
                        }
                    }
                }
                b"mdhd" => {
                    // Version 0: times are u32, version 1: u64; the timescale follows them.
                    let mut b = [0u8; 24];
                    let got = self.read_at(body.start, &mut b)?;
                    let at = if b[0] == 1 { 20 } else { 12 };
                    if got >= at + 4 {
                        let ts = u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
                        if let Some(t) = self.track.as_mut() {
                            t.timescale = Some(ts);
                        }
                    }
                }
                b"elst" => self.read_edit_list(body)?,
                _ => {}
            }
            pos += size;
        }
        Ok(())
    }

    /// Records the first non-empty edit's media time of the current track.
    fn read_edit_list(&mut self, body: std::ops::Range<u64>) -> Result<(), AudioError> {
        let mut b = [0u8; 8];
        if self.read_at(body.start, &mut b)? < 8 {
            return Ok(());
        }
        let wide = b[0] == 1;
        let count = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let entry = if wide { 20 } else { 12 };
        // Empty edits (media time -1) delay the track; the first real one says where it starts.
        for i in 0..u64::from(count).min(16) {
            let at = body.start + 8 + i * entry;
            let mut e = [0u8; 20];
            if at + entry > body.end || self.read_at(at, &mut e[..entry as usize])? < entry as usize
            {
                return Ok(());
            }
            let media_time = if wide {
                i64::from_be_bytes([e[8], e[9], e[10], e[11], e[12], e[13], e[14], e[15]])
            } else {
                i64::from(i32::from_be_bytes([e[4], e[5], e[6], e[7]]))
            };
            if media_time >= 0 {
                if let Some(t) = self.track.as_mut() {
                    t.media_time = Some(media_time as u64);
                }
                return Ok(());
            }
        }
        Ok(())
    }

    /// Takes the priming from the first audio track, if it has an edit list.
    fn end_track(&mut self) {
        let Some(track) = self.track.take() else {
            return;
        };
        if track.handler != Some(*b"soun") || self.audio_track_seen {
            return;
        }
        self.audio_track_seen = true;
        if let (Some(media_time), Some(timescale)) = (track.media_time, track.timescale) {
            if timescale > 0 && media_time > 0 {
                self.priming = Some(Priming {
                    media_time,
                    timescale,
                });
            }
        }
    }

    fn read_at(&mut self, pos: u64, buf: &mut [u8]) -> Result<usize, AudioError> {
        self.r.seek(SeekFrom::Start(pos)).map_err(|e| self.io(e))?;
        read_up_to(self.r, buf).map_err(|e| self.io(e))
    }

    /// Checks a table atom whose entry count is the u32 just before `count_end` (bytes into the
    /// body) and whose entries (`entry` bytes each) follow it. With `fixed_size_at` non-zero, the
    /// u32 at that offset being non-zero means there are no entries (stsz's constant size).
    fn check_table(
        &mut self,
        body: std::ops::Range<u64>,
        count_end: u64,
        entry: u64,
        fixed_size_at: u64,
        kind: &[u8; 4],
    ) -> Result<(), AudioError> {
        let file = self.file;
        let name = String::from_utf8_lossy(kind).into_owned();
        let malformed = |reason: String| AudioError::Malformed {
            file: file.to_string(),
            reason,
        };
        let available = body.end - body.start;
        let mut head = [0u8; 12];
        let want = usize::try_from(count_end).unwrap_or(12).min(12);
        if available < count_end || self.read_at(body.start, &mut head[..want])? < want {
            return Err(malformed(format!(
                "MP4 {name} atom too short for its header"
            )));
        }
        let u32_at =
            |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
        if fixed_size_at != 0 && u32_at(fixed_size_at as usize) != 0 {
            return Ok(());
        }
        let count = u64::from(u32_at(want - 4));
        let needed = count * entry;
        if needed > available - count_end {
            return Err(malformed(format!(
                "MP4 {name} atom declares {count} entries ({needed} bytes) but holds {} bytes",
                available - count_end
            )));
        }
        Ok(())
    }
}

fn read_up_to<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn atom(kind: &[u8; 4], body: &[u8]) -> Vec<u8> {
        let mut a = ((body.len() + 8) as u32).to_be_bytes().to_vec();
        a.extend_from_slice(kind);
        a.extend_from_slice(body);
        a
    }

    fn mp4_with(table: Vec<u8>) -> Vec<u8> {
        let stbl = atom(b"stbl", &table);
        let minf = atom(b"minf", &stbl);
        let mdia = atom(b"mdia", &minf);
        let trak = atom(b"trak", &mdia);
        let moov = atom(b"moov", &trak);
        let mut f = atom(b"ftyp", b"M4A \0\0\0\0");
        f.extend(moov);
        f
    }

    fn table(count: u32, entries: usize, entry: usize) -> Vec<u8> {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&count.to_be_bytes());
        b.extend(std::iter::repeat_n(0u8, entries * entry));
        b
    }

    #[test]
    fn tables_must_hold_their_counts() {
        for (kind, entry) in [(b"stts", 8), (b"stsc", 12), (b"stco", 4), (b"co64", 8)] {
            let ok = mp4_with(atom(kind, &table(3, 3, entry)));
            scan_mp4(&mut Cursor::new(ok), "<t>").unwrap();
            let bad = mp4_with(atom(kind, &table(u32::MAX, 3, entry)));
            let err = scan_mp4(&mut Cursor::new(bad), "<t>")
                .unwrap_err()
                .to_string();
            assert!(err.contains(std::str::from_utf8(kind).unwrap()), "{err}");
        }
    }

    #[test]
    fn priming_comes_from_the_first_audio_tracks_edit_list() {
        let full = |kind: &[u8; 4], fields: &[u8]| {
            let mut body = vec![0u8; 4];
            body.extend_from_slice(fields);
            atom(kind, &body)
        };
        let track = |handler: &[u8; 4], timescale: u32, edits: &[(u32, i32)]| {
            let mut elst = (edits.len() as u32).to_be_bytes().to_vec();
            for (duration, media_time) in edits {
                elst.extend_from_slice(&duration.to_be_bytes());
                elst.extend_from_slice(&media_time.to_be_bytes());
                elst.extend_from_slice(&0x0001_0000u32.to_be_bytes());
            }
            let mut mdhd = vec![0u8; 8];
            mdhd.extend_from_slice(&timescale.to_be_bytes());
            mdhd.extend_from_slice(&0u32.to_be_bytes());
            let mut hdlr = vec![0u8; 4];
            hdlr.extend_from_slice(handler);
            let mut mdia = full(b"mdhd", &mdhd);
            mdia.extend(full(b"hdlr", &hdlr));
            let mut trak = atom(b"edts", &full(b"elst", &elst));
            trak.extend(atom(b"mdia", &mdia));
            atom(b"trak", &trak)
        };
        let mut moov = track(b"vide", 90_000, &[(100, 3000)]);
        moov.extend(track(b"soun", 48_000, &[(500, -1), (500, 2112)]));
        moov.extend(track(b"soun", 44_100, &[(500, 1024)]));
        let mut file = atom(b"ftyp", b"M4A \0\0\0\0");
        file.extend(atom(b"moov", &moov));
        let priming = scan_mp4(&mut Cursor::new(file), "<t>").unwrap().unwrap();
        assert_eq!(
            priming,
            Priming {
                media_time: 2112,
                timescale: 48_000
            }
        );
        assert_eq!(priming.frames(48_000), 2112);
        assert_eq!(priming.frames(24_000), 1056);
    }

    #[test]
    fn stsz_entries_count_only_without_a_constant_size() {
        let mut constant = vec![0u8; 4];
        constant.extend_from_slice(&512u32.to_be_bytes());
        constant.extend_from_slice(&u32::MAX.to_be_bytes());
        scan_mp4(&mut Cursor::new(mp4_with(atom(b"stsz", &constant))), "<t>").unwrap();
        let mut listed = vec![0u8; 8];
        listed.extend_from_slice(&u32::MAX.to_be_bytes());
        let bad = mp4_with(atom(b"stsz", &listed));
        assert!(scan_mp4(&mut Cursor::new(bad), "<t>").is_err());
    }

    #[test]
    fn an_mp4_after_junk_or_an_id3_tag_is_checked_and_other_inputs_pass() {
        let bad = mp4_with(atom(b"stts", &table(1 << 30, 0, 8)));
        let mut junk = vec![7u8; 1000];
        junk.extend_from_slice(&bad);
        assert!(scan_mp4(&mut Cursor::new(junk), "<t>").is_err());
        let mut tagged = b"ID3\x04\0\0\0\0\x01\0".to_vec();
        tagged.extend(std::iter::repeat_n(0u8, 128));
        tagged.extend_from_slice(&bad);
        assert!(scan_mp4(&mut Cursor::new(tagged), "<t>").is_err());
        scan_mp4(&mut Cursor::new(b"RIFF....WAVEfmt ".to_vec()), "<t>").unwrap();
        scan_mp4(&mut Cursor::new(Vec::new()), "<t>").unwrap();
    }
}
