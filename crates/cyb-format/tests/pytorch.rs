//! PyTorch checkpoints: the same small state dict saved by torch.save in the zip and the legacy
//! format reads back to torch's values (tests/fixtures/pytorch, made by
//! tools/fixtures/make_pytorch_fixtures.py); a pickle that asks for os.system, a file that is no
//! state dict, truncations and byte flips are refused with errors naming the file.

use cyb_format::pytorch::read_state_dict;
use serde_json::Value;
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/pytorch")
        .join(rel)
}

#[test]
fn zip_and_legacy_checkpoints_read_torchs_values() {
    let want: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("tiny.json")).unwrap()).unwrap();
    for file in ["tiny_zip.pth", "tiny_legacy.pth"] {
        let sd = read_state_dict(&fixture(file)).unwrap();
        // In the order torch saved them.
        let names: Vec<&str> = sd.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["f32", "f16_t", "bf16", "i64", "param", "row", "col"],
            "{file}"
        );
        for (name, t) in &sd {
            let w = &want[name];
            let shape: Vec<usize> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as usize)
                .collect();
            assert_eq!(t.dims(), &shape[..], "{file} {name}");
            let exp = w["values"].as_array().unwrap();
            let (got, exp): (Vec<f64>, Vec<f64>) = match t.dtype() {
                cyb_tensor::DType::I64 => (
                    t.to_i64_vec().unwrap().iter().map(|&v| v as f64).collect(),
                    exp.iter().map(|v| v.as_f64().unwrap()).collect(),
                ),
                // Exact in f32 (the JSON holds each value's shortest f64 form).
                _ => (
                    t.to_f32_vec()
                        .unwrap()
                        .iter()
                        .map(|&v| f64::from(v))
                        .collect(),
                    exp.iter()
                        .map(|v| f64::from(v.as_f64().unwrap() as f32))
                        .collect(),
                ),
            };
            assert_eq!(got, exp, "{file} {name}");
        }
    }
}

#[test]
fn hostile_checkpoints_are_refused() {
    let e = read_state_dict(&fixture("evil.pth"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("evil.pth") && e.contains("system") && e.contains("global"),
        "{e}"
    );
    let e = read_state_dict(&fixture("not_a_dict.pth"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a dict"), "{e}");
    let dir = std::env::temp_dir().join(format!("cyb-pth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["tiny_zip.pth", "tiny_legacy.pth"] {
        let good = std::fs::read(fixture(file)).unwrap();
        let p = dir.join(file);
        for cut in [0, 1, 2, 10, 60, good.len() / 2, good.len() - 1] {
            std::fs::write(&p, &good[..cut]).unwrap();
            match read_state_dict(&p) {
                Err(e) => assert!(e.to_string().contains(file), "{e}"),
                // The legacy format's last storage may lose bytes it never needed only if the
                // cut is past it; anything else must fail.
                Ok(_) => panic!("{file} cut at {cut} was read"),
            }
        }
        for i in (0..good.len()).step_by(7) {
            let mut bad = good.clone();
            bad[i] ^= 0x5a;
            std::fs::write(&p, &bad).unwrap();
            // Either it still reads (a flipped value byte) or it is refused naming the file;
            // it never panics.
            if let Err(e) = read_state_dict(&p) {
                assert!(e.to_string().contains(file), "{e}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
