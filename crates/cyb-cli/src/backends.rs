//! `cyb-llm backends`: every backend this build knows, and whether it can run here.

use cyb_tensor::Result;

#[derive(clap::Args)]
pub struct BackendsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: BackendsArgs) -> Result<()> {
    let list = cyb_runtime::Runtime::available_backends();
    if args.json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|b| serde_json::json!({"name": b.name, "available": b.available, "detail": b.detail}))
            .collect();
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    for b in list {
        let state = if b.available { "yes" } else { "no" };
        println!("{:<12} {:<4} {}", b.name, state, b.detail);
    }
    Ok(())
}
