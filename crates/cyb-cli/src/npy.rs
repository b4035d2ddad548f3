//! Writing `.npy` files (numpy format v1.0): little-endian, C order.
//!
//! Layout: `\x93NUMPY`, version 1.0, u16 header length, then a Python dict literal padded with
//! spaces and a final newline so the data starts on a 64-byte boundary, as numpy writes it.

use cyb_tensor::{Error, Result};
use std::io::Write;
use std::path::Path;

/// The bytes before the data of an array of `shape` whose numpy type string is `descr`.
pub(crate) fn header(shape: &[usize], descr: &str) -> Result<Vec<u8>> {
    let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
    let tuple = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    // magic (6) + version (2) + length (2) + dict + '\n' must be a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let len = u16::try_from(dict.len()).map_err(|_| {
        Error::invalid(
            "npy",
            format!("shape {shape:?} needs a header too long for .npy v1.0"),
        )
    })?;
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    Ok(out)
}

/// Writes `data` (row-major, `shape`) to `path` as a `.npy` file.
pub fn write_f32(path: &Path, shape: &[usize], data: &[f32]) -> Result<()> {
    let numel = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if numel != Some(data.len()) {
        return Err(Error::shape("npy", shape, &[data.len()]));
    }
    let mut bytes = header(shape, "<f4")?;
    bytes.reserve(data.len() * 4);
    for v in data {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    write_file(path, &bytes)
}

/// Writes a whole `.npy` file.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::create(path).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files numpy itself saved (tools/fixtures/make_format_fixtures.py); ours must be identical.
    #[test]
    fn matches_numpy_byte_for_byte() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/format");
        let tmp = std::env::temp_dir().join(format!("cyb-npy-{}.npy", std::process::id()));
        let cases: [(&str, Vec<usize>, Vec<f32>); 2] = [
            (
                "npy_2x3.npy",
                vec![2, 3],
                (0..6).map(|i| i as f32 - 2.5).collect(),
            ),
            ("npy_5.npy", vec![5], vec![1.0, -1.0, 0.5, 1e30, -0.0]),
        ];
        for (name, shape, data) in cases {
            write_f32(&tmp, &shape, &data).unwrap();
            let ours = std::fs::read(&tmp).unwrap();
            let numpy = std::fs::read(dir.join(name)).unwrap();
            assert_eq!(ours, numpy, "{name}");
        }
        let _ = std::fs::remove_file(&tmp);
        assert!(write_f32(&tmp, &[2, 2], &[1.0]).is_err());
    }

    #[test]
    fn scalar_and_rank3_headers_are_aligned() {
        for shape in [vec![], vec![1, 2, 3]] {
            let h = header(&shape, "<f4").unwrap();
            assert_eq!(h.len() % 64, 0);
            assert_eq!(h.last(), Some(&b'\n'));
        }
        let h = header(&[], "<f4").unwrap();
        assert!(String::from_utf8_lossy(&h).contains("'shape': ()"));
    }
}
