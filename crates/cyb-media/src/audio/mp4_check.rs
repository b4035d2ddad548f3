//! A check of MP4/M4A sample tables before symphonia reads them.
//!
//! symphonia's isomp4 reader reserves memory for as many table entries as an atom's count
//! field says (`stts`, `stsc`, `stsz`, `stco`, `co64`) before reading them: a 1 KiB file can
//! ask for 32 GiB and abort the process. Here every such atom anywhere in the box tree must
//! hold the bytes its count needs. Box sizes past the end of the input are clamped to it (a
//! truncated download is for the decoder to judge); only the counts are enforced.
//!
//! symphonia's probe finds a container by scanning up to 1 MiB for its marker, so every
//! `ftyp` in the first 1 MiB (after an ID3v2 tag, which the probe skips) is checked as the
//! start of an MP4.

use std::io::{self, Read, Seek, SeekFrom};

use super::AudioError;

/// How far symphonia's probe scans for a format marker.
const PROBE_WINDOW: u64 = 1024 * 1024;
/// Box nesting deeper than this is not followed (real files nest about 8 deep).
const MAX_DEPTH: u32 = 16;
/// `ftyp` occurrences checked; real files have one.
const MAX_STARTS: usize = 32;

/// Checks `r` (read from its start) as described in the module doc. Inputs with no `ftyp`
/// pass untouched. Leaves `r` at its start.
pub(crate) fn check_mp4_tables<R: Read + Seek>(r: &mut R, file: &str) -> Result<(), AudioError> {
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
    for &start in &starts {
        walk(r, start, len, 0, file)?;
    }
    r.seek(SeekFrom::Start(0)).map_err(io)?;
    Ok(())
}

/// The size of an ID3v2 tag at the start (header and footer included), 0 without one.
fn id3v2_len<R: Read + Seek>(r: &mut R) -> io::Result<u64> {
    r.seek(SeekFrom::Start(0))?;
    let mut h = [0u8; 10];
    let mut got = 0;
    while got < h.len() {
        match r.read(&mut h[got..])? {
            0 => return Ok(0),
            n => got += n,
        }
    }
    if &h[..3] != b"ID3" {
        return Ok(0);
    }
    let size = h[6..10]
        .iter()
        .fold(0u64, |acc, b| (acc << 7) | u64::from(b & 0x7f));
    let footer = if h[5] & 0x10 != 0 { 10 } else { 0 };
    Ok(10 + size + footer)
}

/// Walks the boxes in `start..end`, descending into containers.
fn walk<R: Read + Seek>(
    r: &mut R,
    start: u64,
    end: u64,
    depth: u32,
    file: &str,
) -> Result<(), AudioError> {
    let io = |source: io::Error| AudioError::Io {
        file: file.to_string(),
        source,
    };
    let mut pos = start;
    while end.saturating_sub(pos) >= 8 {
        r.seek(SeekFrom::Start(pos)).map_err(io)?;
        let mut h = [0u8; 16];
        let got = read_up_to(r, &mut h).map_err(io)?;
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
            b"moov" | b"trak" | b"mdia" | b"minf" | b"stbl" | b"edts" | b"dinf" | b"mvex"
            | b"moof" | b"traf" | b"udta"
                if depth < MAX_DEPTH =>
            {
                walk(r, body.start, body.end, depth + 1, file)?;
            }
            b"stts" => check_table(r, body, 8, 8, 0, &kind, file)?,
            b"stsc" => check_table(r, body, 8, 12, 0, &kind, file)?,
            b"stco" => check_table(r, body, 8, 4, 0, &kind, file)?,
            b"co64" => check_table(r, body, 8, 8, 0, &kind, file)?,
            // stsz: version/flags, sample size, count; entries only when the size is 0.
            b"stsz" => check_table(r, body, 12, 4, 4, &kind, file)?,
            _ => {}
        }
        pos += size;
    }
    Ok(())
}

/// Checks a table atom whose entry count is the u32 just before `count_end` (bytes into the
/// body) and whose entries (`entry` bytes each) follow it. With `fixed_size_at` non-zero, the
/// u32 at that offset being non-zero means there are no entries (stsz's constant size).
fn check_table<R: Read + Seek>(
    r: &mut R,
    body: std::ops::Range<u64>,
    count_end: u64,
    entry: u64,
    fixed_size_at: u64,
    kind: &[u8; 4],
    file: &str,
) -> Result<(), AudioError> {
    let name = String::from_utf8_lossy(kind).into_owned();
    let malformed = |reason: String| AudioError::Malformed {
        file: file.to_string(),
        reason,
    };
    let io = |source: io::Error| AudioError::Io {
        file: file.to_string(),
        source,
    };
    let available = body.end - body.start;
    r.seek(SeekFrom::Start(body.start)).map_err(io)?;
    let mut head = [0u8; 12];
    let want = usize::try_from(count_end).unwrap_or(12).min(12);
    if available < count_end || read_up_to(r, &mut head[..want]).map_err(io)? < want {
        return Err(malformed(format!(
            "MP4 {name} atom too short for its header"
        )));
    }
    let u32_at = |i: usize| u32::from_be_bytes([head[i], head[i + 1], head[i + 2], head[i + 3]]);
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
            check_mp4_tables(&mut Cursor::new(ok), "<t>").unwrap();
            let bad = mp4_with(atom(kind, &table(u32::MAX, 3, entry)));
            let err = check_mp4_tables(&mut Cursor::new(bad), "<t>")
                .unwrap_err()
                .to_string();
            assert!(err.contains(std::str::from_utf8(kind).unwrap()), "{err}");
        }
    }

    #[test]
    fn stsz_entries_count_only_without_a_constant_size() {
        let mut constant = vec![0u8; 4];
        constant.extend_from_slice(&512u32.to_be_bytes());
        constant.extend_from_slice(&u32::MAX.to_be_bytes());
        check_mp4_tables(&mut Cursor::new(mp4_with(atom(b"stsz", &constant))), "<t>").unwrap();
        let mut listed = vec![0u8; 8];
        listed.extend_from_slice(&u32::MAX.to_be_bytes());
        let bad = mp4_with(atom(b"stsz", &listed));
        assert!(check_mp4_tables(&mut Cursor::new(bad), "<t>").is_err());
    }

    #[test]
    fn an_mp4_after_junk_or_an_id3_tag_is_checked_and_other_inputs_pass() {
        let bad = mp4_with(atom(b"stts", &table(1 << 30, 0, 8)));
        let mut junk = vec![7u8; 1000];
        junk.extend_from_slice(&bad);
        assert!(check_mp4_tables(&mut Cursor::new(junk), "<t>").is_err());
        let mut tagged = b"ID3\x04\0\0\0\0\x01\0".to_vec();
        tagged.extend(std::iter::repeat_n(0u8, 128));
        tagged.extend_from_slice(&bad);
        assert!(check_mp4_tables(&mut Cursor::new(tagged), "<t>").is_err());
        check_mp4_tables(&mut Cursor::new(b"RIFF....WAVEfmt ".to_vec()), "<t>").unwrap();
        check_mp4_tables(&mut Cursor::new(Vec::new()), "<t>").unwrap();
    }
}
