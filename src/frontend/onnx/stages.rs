//! A model whose shapes depend on values, cut into stages.
//!
//! The planner and the runtime take a graph whose every shape is known. An
//! op whose output shape depends on the values of its input (NonZero,
//! NonMaxSuppression, Unique) breaks that, wherever its input is computed at
//! run time. Such a model is cut before the first of those ops: the nodes
//! that do not depend on it are the first stage, a model of its own that
//! gives every value the later stages read; the op (the cut) runs on the
//! first stage's outputs; the nodes that depend on it are the rest, imported
//! when the cut's outputs are known and shaped, as a model whose inputs are
//! every value it reads from before the cut. Each stage is planned and
//! compiled with every shape known, and the rest may be cut again. This is
//! how graph compilers break a trace at a data-dependent op.

use super::ops::data_dependent_op;
use super::{free_names, node_order, node_span, DecodedModel, ImportError};
use crate::graph::{DType, Span, Tensor};
use crate::ops::DataDependent;
use onnx_protobuf::{
    tensor_shape_proto, type_proto, GraphProto, ModelProto, NodeProto, TensorShapeProto, TypeProto,
    ValueInfoProto,
};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// A model cut before an op whose output shape depends on values.
pub struct Stages {
    /// The nodes that do not depend on the cut, giving the values the cut
    /// and the rest read and the graph outputs they compute; `None` when
    /// those are all graph inputs and weights.
    pub first: Option<DecodedModel>,
    /// The op the model is cut at.
    pub cut: Cut,
    /// The nodes that depend on the cut; `None` when none computes a graph
    /// output.
    pub rest: Option<Rest>,
    /// The graph's outputs, by name.
    pub outputs: Vec<String>,
    /// The weights, by name, which the cut and the graph's outputs may read.
    weights: HashMap<String, Tensor>,
}

impl Stages {
    /// The weight named `name`, if it is one.
    pub fn weight(&self, name: &str) -> Option<&Tensor> {
        self.weights.get(name)
    }
}

/// The op a model is cut at.
pub struct Cut {
    /// What it computes.
    pub op: DataDependent,
    /// Its layer.
    pub span: Span,
    /// The names of its inputs, `""` for one left out.
    pub inputs: Vec<String>,
    /// The names of its outputs, `""` for one not used.
    pub outputs: Vec<String>,
}

/// The nodes after a cut, made into a model once the types of what they
/// read are known.
pub struct Rest {
    model: ModelProto,
    initializers: Vec<(String, Tensor)>,
    file: String,
    base_dir: Option<PathBuf>,
    /// The values it reads from before the cut (the cut's outputs included),
    /// in the order its graph takes them as inputs.
    pub inputs: Vec<String>,
}

impl Rest {
    /// The rest as a model whose inputs have these element types and ranks
    /// (in the order of [`Rest::inputs`]), every dimension free.
    pub fn decoded(&self, types: &[(DType, usize)]) -> DecodedModel {
        let mut model = self.model.clone();
        let graph = model.graph.as_mut().expect("`stages` built the graph");
        graph.input = (self.inputs.iter().zip(types))
            .map(|(name, &(dtype, rank))| free_value(name, dtype, rank))
            .collect();
        DecodedModel {
            model,
            initializers: self.initializers.clone(),
            file: self.file.clone(),
            base_dir: self.base_dir.clone(),
        }
    }
}

/// A graph input of `dtype` and `rank`, each dimension named apart (free,
/// and not the same as any other).
fn free_value(name: &str, dtype: DType, rank: usize) -> ValueInfoProto {
    let mut shape = TensorShapeProto::new();
    for axis in 0..rank {
        let mut dim = tensor_shape_proto::Dimension::new();
        dim.value = Some(tensor_shape_proto::dimension::Value::DimParam(format!(
            "{name}:{axis}"
        )));
        shape.dim.push(dim);
    }
    let mut tensor = type_proto::Tensor::new();
    tensor.elem_type = dtype.onnx_code();
    tensor.shape = Some(shape).into();
    let mut ty = TypeProto::new();
    ty.value = Some(type_proto::Value::TensorType(tensor));
    let mut vi = ValueInfoProto::new();
    vi.name = name.to_string();
    vi.type_ = Some(ty).into();
    vi
}

impl DecodedModel {
    /// The model cut before the first op of its main graph whose output
    /// shape depends on values computed at run time; `None` when it has no
    /// such op (one whose inputs are weights or constants folds at import).
    pub fn stages(&self) -> Result<Option<Stages>, ImportError> {
        let graph = self.model.graph.as_ref().expect("`new` checked the graph");
        let nodes = &graph.node;
        let weights: HashMap<String, Tensor> = self.initializers.iter().cloned().collect();
        let constant_node = |n: &NodeProto| n.op_type == "Constant" && n.input.is_empty();
        let constants: HashSet<&str> = (nodes.iter().filter(|n| constant_node(n)))
            .flat_map(|n| n.output.iter().map(String::as_str))
            .collect();
        let known =
            |name: &str| name.is_empty() || weights.contains_key(name) || constants.contains(name);
        // Values defined before any node, as `node_order` takes them.
        let given: HashMap<String, ()> = (graph.input.iter())
            .map(|vi| vi.name.clone())
            .chain(weights.keys().cloned())
            .map(|name| (name, ()))
            .collect();
        let order = node_order(nodes, &given, &self.file, "")?;
        let mut cut = None;
        for &i in &order {
            let n = &nodes[i];
            let op = data_dependent_op(n, &node_span(&self.file, n, i, ""))?;
            if let Some(op) = op.filter(|_| !n.input.iter().all(|x| known(x))) {
                cut = Some((i, op));
                break;
            }
        }
        let Some((at, op)) = cut else {
            return Ok(None);
        };
        // The nodes downstream of the cut: those reading (directly or from a
        // subgraph) a value the cut or another of them computes.
        let reads = |n: &NodeProto| -> Vec<String> {
            let nested = (n.attribute.iter())
                .flat_map(|a| a.g.as_ref().into_iter().chain(&a.graphs))
                .flat_map(free_names);
            n.input.iter().cloned().chain(nested).collect()
        };
        let mut after: HashSet<&str> = nodes[at].output.iter().map(String::as_str).collect();
        let mut downstream = vec![false; nodes.len()];
        for &i in &order {
            if i != at && reads(&nodes[i]).iter().any(|x| after.contains(x.as_str())) {
                downstream[i] = true;
                after.extend(nodes[i].output.iter().map(String::as_str));
            }
        }
        let produced_by = |rest: bool| -> HashSet<&str> {
            (order.iter())
                .filter(|&&i| i != at && downstream[i] == rest)
                .flat_map(|&i| nodes[i].output.iter().map(String::as_str))
                .filter(|o| !o.is_empty())
                .collect()
        };
        let (in_first, in_rest) = (produced_by(false), produced_by(true));
        let outputs: Vec<String> = graph.output.iter().map(|o| o.name.clone()).collect();
        // Shape arithmetic before the cut (Shape and Size, and ops on their
        // values and constants only) is computed again in the rest from the
        // shapes of what it reads: there it stays a constant at import, as a
        // TopK's k or a Reshape's shape must be.
        let mut from_shapes: HashSet<&str> = constants.clone();
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for &i in order.iter().filter(|&&i| i != at && !downstream[i]) {
            let n = &nodes[i];
            producer.extend(n.output.iter().map(|o| (o.as_str(), i)));
            let no_subgraph = n
                .attribute
                .iter()
                .all(|a| a.g.is_none() && a.graphs.is_empty());
            let shape_only = matches!(n.op_type.as_str(), "Shape" | "Size")
                || (no_subgraph
                    && !n.input.is_empty()
                    && (n.input.iter()).all(|x| known(x) || from_shapes.contains(x.as_str())));
            if shape_only {
                from_shapes.extend(n.output.iter().map(String::as_str));
            }
        }
        // What the rest reads from before it: the cut's outputs, the first
        // stage's values and graph inputs. Constant nodes and shape
        // arithmetic are copied into it instead.
        let mut rest_inputs: Vec<String> = vec![];
        let mut copied: HashSet<usize> = HashSet::new();
        let mut wanted: Vec<(String, bool)> = (order.iter())
            .filter(|&&i| downstream[i])
            .flat_map(|&i| reads(&nodes[i]))
            .map(|x| (x, false))
            .collect();
        wanted.reverse();
        // Each name with whether only its shape is read (a Shape's input).
        while let Some((x, shape_read)) = wanted.pop() {
            if x.is_empty() || in_rest.contains(x.as_str()) || weights.contains_key(&x) {
                continue;
            }
            match producer.get(x.as_str()) {
                Some(&p)
                    if from_shapes.contains(x.as_str()) && !shape_read
                        || constants.contains(x.as_str()) =>
                {
                    if !copied.insert(p) {
                        continue;
                    }
                    let n = &nodes[p];
                    let only_shape = matches!(n.op_type.as_str(), "Shape" | "Size");
                    wanted.extend(n.input.iter().rev().map(|i| (i.clone(), only_shape)));
                }
                _ if !rest_inputs.contains(&x) => rest_inputs.push(x),
                _ => {}
            }
        }
        let rest_outputs: Vec<&ValueInfoProto> = (graph.output.iter())
            .filter(|o| in_rest.contains(o.name.as_str()))
            .collect();
        let rest = (!rest_outputs.is_empty()).then(|| {
            let nodes = (order.iter())
                .filter(|&&i| downstream[i] || copied.contains(&i))
                .map(|&i| named(&nodes[i], i))
                .collect();
            Rest {
                model: self.with_graph(GraphProto {
                    node: nodes,
                    output: rest_outputs.into_iter().cloned().collect(),
                    ..graph.clone()
                }),
                initializers: self.initializers.clone(),
                file: self.file.clone(),
                base_dir: self.base_dir.clone(),
                inputs: rest_inputs.clone(),
            }
        });
        // What the first stage gives: every value it computes that the cut,
        // the rest or the graph's outputs read.
        let rest_reads = match rest {
            Some(ref r) => r.inputs.clone(),
            None => vec![],
        };
        let mut first_outputs: Vec<String> = vec![];
        for x in (nodes[at].input.iter()).chain(&rest_reads).chain(&outputs) {
            if in_first.contains(x.as_str()) && !first_outputs.contains(x) {
                first_outputs.push(x.clone());
            }
        }
        let first = (!first_outputs.is_empty()).then(|| {
            let declared: HashMap<&str, &ValueInfoProto> = (graph.value_info.iter())
                .chain(&graph.output)
                .map(|v| (v.name.as_str(), v))
                .collect();
            let output = (first_outputs.iter())
                .map(|name| match declared.get(name.as_str()) {
                    Some(&v) => v.clone(),
                    None => ValueInfoProto {
                        name: name.clone(),
                        ..ValueInfoProto::default()
                    },
                })
                .collect();
            let nodes = (order.iter())
                .filter(|&&i| i != at && !downstream[i])
                .map(|&i| named(&nodes[i], i))
                .collect();
            DecodedModel {
                model: self.with_graph(GraphProto {
                    node: nodes,
                    output,
                    ..graph.clone()
                }),
                initializers: self.initializers.clone(),
                file: self.file.clone(),
                base_dir: self.base_dir.clone(),
            }
        });
        let n = &nodes[at];
        Ok(Some(Stages {
            first,
            cut: Cut {
                op,
                span: node_span(&self.file, n, at, ""),
                inputs: n.input.clone(),
                outputs: n.output.clone(),
            },
            rest,
            outputs,
            weights,
        }))
    }

    /// The model with `graph` as its main graph.
    fn with_graph(&self, graph: GraphProto) -> ModelProto {
        ModelProto {
            graph: Some(graph).into(),
            ..self.model.clone()
        }
    }
}

/// Node `index` of the whole graph, named as its layer is there: a stage
/// numbers its nodes anew, and a nameless node's layer name comes from its
/// number.
fn named(n: &NodeProto, index: usize) -> NodeProto {
    let mut n = n.clone();
    if n.name.is_empty() {
        n.name = Span::default_layer_name(&n.op_type, index);
    }
    n
}
