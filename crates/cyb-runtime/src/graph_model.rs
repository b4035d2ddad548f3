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
        self.graph_model(read_graph(path)?, fuse)
    }

    /// A torchvision classifier from a PyTorch checkpoint (`torch.save` of its state dict):
    /// `arch` (`resnet50`, `mobilenet_v2`, see `cyb_format::pytorch::torchvision`) built for
    /// `[1, 3, height, width]` images, giving the logits.
    pub fn load_torchvision(
        &self,
        path: &Path,
        arch: &str,
        height: usize,
        width: usize,
    ) -> Result<GraphModel> {
        let state = cyb_format::pytorch::read_state_dict(path)?;
        let mut graph = cyb_format::pytorch::torchvision::graph(&state, arch, height, width, path)?;
        drop(state);
        cyb_graph::prepare(&mut graph)?;
        self.graph_model(graph, true)
    }

    /// A prepared graph (`cyb_graph::prepare`) bound to this runtime; with `fuse`, fused for
    /// the chain's first backend as [`Runtime::load_graph`] does.
    pub fn graph_model(&self, mut graph: Graph, fuse: bool) -> Result<GraphModel> {
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

impl std::fmt::Debug for GraphModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphModel")
            .field("nodes", &self.graph.nodes.len())
            .finish_non_exhaustive()
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
