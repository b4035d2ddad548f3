//! Streaming memory read bandwidth: THREADS threads each sum their share of a buffer much
//! larger than the caches; prints the median of RUNS passes in GB/s (1e9 bytes/s). This is the
//! bandwidth that bounds decode speed (every weight byte is read once per token).
//!
//! `cargo run --release -p cyb-cli --example membw -- [THREADS=2] [MIB=1024] [RUNS=11]`

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let threads: usize = args.next().map_or(Ok(2), |s| s.parse())?;
    let mib: usize = args.next().map_or(Ok(1024), |s| s.parse())?;
    let runs: usize = args.next().map_or(Ok(11), |s| s.parse())?;
    if threads == 0 || mib == 0 || runs == 0 {
        return Err("THREADS, MIB and RUNS must be at least 1".into());
    }
    let words = mib * (1 << 20) / 8;
    // Written once so every page is mapped before timing.
    let buf: Vec<u64> = (0..words as u64).collect();
    let chunk = words.div_ceil(threads);
    let mut rates = Vec::with_capacity(runs);
    let mut check = 0u64;
    for _ in 0..runs {
        let t0 = Instant::now();
        let sum = std::thread::scope(|s| {
            let handles: Vec<_> = buf
                .chunks(chunk)
                .map(|part| s.spawn(move || sum_words(part)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        });
        let secs = t0.elapsed().as_secs_f64();
        check = check.wrapping_add(std::hint::black_box(sum));
        rates.push((words * 8) as f64 / secs / 1e9);
    }
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    println!(
        "read bandwidth, {threads} threads, {mib} MiB, median of {runs}: {median:.2} GB/s \
         (min {:.2}, max {:.2}) [checksum {check:x}]",
        rates[0],
        rates[rates.len() - 1]
    );
    Ok(())
}

/// Eight independent accumulators so the loop is bound by loads, not by the add chain.
fn sum_words(part: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let mut blocks = part.chunks_exact(8);
    for b in &mut blocks {
        for (a, &x) in acc.iter_mut().zip(b) {
            *a = a.wrapping_add(x);
        }
    }
    let tail = blocks
        .remainder()
        .iter()
        .fold(0u64, |a, &x| a.wrapping_add(x));
    acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
}
