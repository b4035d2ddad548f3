//! Graph models: an ONNX file, or a `.model` holding a graph (`cyb-llm import X.onnx`), made
//! ready to run (`cyb_graph::prepare`: types, folded constants, curated ops) and run through the
//! runtime's dispatcher.

use crate::Runtime;
use cyb_backend::Dispatcher;
use cyb_graph::{ExecPlan, Graph};
use cyb_tensor::{Result, Tensor};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The graph of an ONNX or `.model` file, prepared to run (what `import` stores and `infer`
/// runs).
pub fn read_graph(path: &Path) -> Result<Graph> {
    let mut g = cyb_format::model_container::load_graph(path)?;
    cyb_graph::prepare(&mut g)?;
    Ok(g)
}

/// A prepared graph bound to a runtime's backend chain.
pub struct GraphModel {
    graph: Graph,
    plan: ExecPlan,
    dispatcher: Arc<Dispatcher>,
}

impl Runtime {
    /// Loads the graph of an ONNX or `.model` file. With `fuse`, matmul + bias + activation and
    /// residual add + norm become one op where the chain's first backend has a kernel for it
    /// (a graph whose types cannot be inferred runs unfused).
    pub fn load_graph(&self, path: &Path, fuse: bool) -> Result<GraphModel> {
        let mut graph = read_graph(path)?;
        if fuse && cyb_graph::infer_types(&mut graph).is_ok() {
            cyb_graph::fuse_for_backend(&mut graph, self.dispatcher().primary().as_ref());
        }
        Ok(GraphModel {
            plan: ExecPlan::new(&graph)?,
            graph,
            dispatcher: self.dispatcher().clone(),
        })
    }
}

impl GraphModel {
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Runs the graph on named inputs; the outputs come back on the host, in the graph's order.
    pub fn run(&self, inputs: &HashMap<String, Tensor>) -> Result<Vec<(String, Tensor)>> {
        let ex = cyb_graph::Executor::with_plan(&self.graph, &self.plan, &self.dispatcher)?;
        let (outs, _) = ex.run(inputs)?;
        Ok(outs)
    }
}
