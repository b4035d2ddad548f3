//! Every curated family's fixtures on every backend of this build (the reference first, as a
//! check of the fixtures themselves), at the tolerances of the family's own tests.

use cyb_backend::Dispatcher;
use cyb_conformance::{families, targets};
use std::sync::Arc;

#[test]
fn every_family_on_every_backend_matches_transformers() {
    let (targets, missing) = targets::targets();
    targets::require_all(&missing);
    let mut chains = vec![("reference".to_string(), Arc::new(Dispatcher::reference()))];
    for t in targets {
        chains.push((t.name, Arc::new(Dispatcher::new(vec![t.backend]))));
    }
    let mut failures = Vec::new();
    let cases = families::all();
    for (name, d) in &chains {
        for case in &cases {
            if let Err(e) = (case.check)(d) {
                failures.push(format!("{} on {name}: {e}", case.name));
            }
        }
        eprintln!("{} family fixtures checked on {name}", cases.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
