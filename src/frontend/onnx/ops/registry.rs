//! The table of the operators the importer knows: each (domain, op type) with
//! the function that imports it. An operator is supported exactly when it is
//! registered here; every op family adds its own in its `register`.

use super::context::{NodeCtx, Res};
use crate::graph::ValueRef;
use std::collections::BTreeMap;

/// The default ONNX domain, which a node names as "" or "ai.onnx".
pub(super) const AI_ONNX: &str = "";

/// The domain of operators ONNX previews before they join the default one.
pub(super) const AI_ONNX_PREVIEW: &str = "ai.onnx.preview";

/// Imports one node: adds its ops to the graph and returns the values of its
/// outputs in order (`None` for an output it does not compute). Attribute
/// values it cannot import, and what differs between opsets, are its own to
/// check; its errors name the node's layer.
pub(in crate::frontend::onnx) type ImportFn = fn(&mut NodeCtx) -> Res<Vec<Option<ValueRef>>>;

/// The import function of every supported operator, by domain and op type.
#[derive(Default)]
pub(in crate::frontend::onnx) struct Registry {
    domains: BTreeMap<&'static str, BTreeMap<&'static str, ImportFn>>,
}

impl Registry {
    /// Registers `import` for `op_type` of `domain`; registering an operator
    /// twice is a bug in the family files.
    pub(super) fn add(&mut self, domain: &'static str, op_type: &'static str, import: ImportFn) {
        let previous = self
            .domains
            .entry(domain)
            .or_default()
            .insert(op_type, import);
        assert!(previous.is_none(), "'{op_type}' is registered twice");
    }

    /// The import function of `op_type` in `domain`, if it is supported.
    pub(in crate::frontend::onnx) fn get(&self, domain: &str, op_type: &str) -> Option<ImportFn> {
        let domain = if domain == "ai.onnx" { AI_ONNX } else { domain };
        self.domains.get(domain)?.get(op_type).copied()
    }

    /// Every registered (domain, op type), sorted.
    #[cfg(test)]
    pub(super) fn op_types(&self) -> Vec<(&'static str, &'static str)> {
        self.domains
            .iter()
            .flat_map(|(&d, ops)| ops.keys().map(move |&op| (d, op)))
            .collect()
    }
}
