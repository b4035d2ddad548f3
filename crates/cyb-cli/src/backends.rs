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
    let adapters = cyb_runtime::Runtime::wgpu_adapters();
    let auto = cyb_runtime::auto_backend();
    if args.json {
        let v: Vec<serde_json::Value> = list
            .iter()
            .map(|b| {
                let mut j = serde_json::json!({"name": b.name, "available": b.available, "detail": b.detail});
                if b.name == "wgpu" {
                    j["adapters"] = serde_json::json!(adapters);
                }
                j
            })
            .collect();
        let mut v = v;
        v.push(serde_json::json!({
            "name": "auto",
            "available": true,
            "detail": format!("picks {}: {}", auto.name, auto.reason),
            "picks": auto.name,
        }));
        println!("{}", serde_json::Value::Array(v));
        return Ok(());
    }
    for b in list {
        let state = if b.available { "yes" } else { "no" };
        println!("{:<12} {:<4} {}", b.name, state, b.detail);
        if b.name == "wgpu" {
            if adapters.is_empty() {
                println!(
                    "{:<17} no adapter found (a Vulkan, Metal, DX12 or GL driver is needed)",
                    ""
                );
            }
            for a in &adapters {
                println!("{:<17} adapter: {a}", "");
            }
        }
    }
    println!(
        "{:<12} {:<4} picks {}: {} (the default)",
        "auto", "yes", auto.name, auto.reason
    );
    Ok(())
}
