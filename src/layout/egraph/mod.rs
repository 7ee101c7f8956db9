//! The e-graph in which layout transforms are cancelled, composed and moved.
//!
//! Every e-class is one physical tensor: a logical tensor stored in a layout,
//! with what its padding holds. Two nodes share a class only when they compute
//! the same physical buffer (padding included, up to `undef`), which is what
//! lets a rule rely on the padding of a class. The analysis carries, per class,
//! the logical shape, layout, known pad value (with its origin) and the spans
//! of every source layer that the class stands for.
//!
//! Ops are nodes whose first child is an `Atom::Op` naming an entry of the op
//! table: the graph op as it runs on the physical buffers, with its output
//! logical shapes and layouts. The node name says which rules may apply to it
//! ("unary", "pool", ...); "op" is every op no rule moves a transform across.

use super::{Assumption, Layout, PadValue};
use crate::graph::{
    broadcast_shapes, infer_outputs, merge_spans, DType, Graph, LaidOut, Op, Span, ValueRef,
    ValueType,
};
use egg::{Analysis, DidMerge, Id};
use rustc_hash::FxHashMap;
use std::fmt;
use std::hash::Hasher;
use std::str::FromStr;

mod convert;
mod node_error;
mod region;
pub use convert::{graph_to_egraph, region_to_egraph, GraphEGraph};
pub use node_error::NodeError;
pub use region::{lang_name, rewrite_region};

/// A leaf of the language: an attribute of a node, or a graph source.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Atom {
    /// A layout argument of a transform.
    Layout(Layout),
    /// A pad value argument.
    Pad(PadValue),
    /// A list of extents or indices (pad begins and ends, tuple indices).
    Ints(Vec<usize>),
    /// An entry of the op table.
    Op(usize),
    /// A graph input or constant (an entry of the source table).
    Source(usize),
    /// An entry of the assumption table (the third child of a crop; a crop
    /// without an assumption has `Pad(Undef)` there).
    Assume(usize),
    /// Which output of a multi-output op.
    Index(usize),
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Atom::Layout(l) => write!(f, "L:{l}"),
            Atom::Pad(p) => write!(f, "P:{p}"),
            Atom::Ints(v) => {
                let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
                write!(f, "[{}]", items.join(","))
            }
            Atom::Op(k) => write!(f, "op#{k}"),
            Atom::Source(k) => write!(f, "src#{k}"),
            Atom::Assume(k) => write!(f, "assume#{k}"),
            Atom::Index(i) => write!(f, "#{i}"),
        }
    }
}

impl FromStr for Atom {
    type Err = NodeError;
    fn from_str(s: &str) -> Result<Atom, NodeError> {
        let num = |t: &str| {
            t.parse::<usize>()
                .map_err(|_| NodeError::Atom(format!("bad number in '{s}'")))
        };
        if let Some(l) = s.strip_prefix("L:") {
            return Ok(Atom::Layout(Layout::parse(l)?));
        }
        if let Some(p) = s.strip_prefix("P:") {
            return p
                .parse()
                .map(Atom::Pad)
                .map_err(|e| NodeError::Atom(e.to_string()));
        }
        if let Some(k) = s.strip_prefix("op#") {
            return num(k).map(Atom::Op);
        }
        if let Some(k) = s.strip_prefix("src#") {
            return num(k).map(Atom::Source);
        }
        if let Some(k) = s.strip_prefix("assume#") {
            return num(k).map(Atom::Assume);
        }
        if let Some(k) = s.strip_prefix('#') {
            return num(k).map(Atom::Index);
        }
        if let Some(list) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            if list.is_empty() {
                return Ok(Atom::Ints(vec![]));
            }
            return list
                .split(',')
                .map(num)
                .collect::<Result<_, _>>()
                .map(Atom::Ints);
        }
        Err(NodeError::Atom(format!("'{s}' is not an atom")))
    }
}

mod lang {
    // egg's macro takes no doc comments on variants: each is described by the
    // comment above it, and the enum by its doc.
    #![allow(missing_docs)]
    use super::Atom;
    use egg::{define_language, Id};

    define_language! {
        /// The language of the e-graph: the graph's ops plus the transforms.
        pub enum Lang {
            // from, to, pad value, x
            "xform" = Xform([Id; 4]),
            // begins, ends, value, x
            "pad" = Pad([Id; 4]),
            // begins, ends, assumption, x
            "crop" = Crop([Id; 4]),
            "unary" = Unary([Id; 2]),
            "binary" = Binary([Id; 3]),
            "pool" = Pool([Id; 2]),
            "reshape" = Reshape([Id; 2]),
            "transpose" = Transpose([Id; 2]),
            "concat" = Concat(Box<[Id]>),
            // op, x, weights, [bias]
            "conv" = Conv(Box<[Id]>),
            // op, x: an explicit pad of the graph (ONNX Pad, TFLite PAD)
            "padding" = Padding([Id; 2]),
            // op, x
            "slice" = Slice([Id; 2]),
            "op" = Other(Box<[Id]>),
            // index, tuple
            "get" = Get([Id; 2]),
            Atom(Atom),
        }
    }
}
pub use lang::Lang;

/// An op as it runs on physical buffers, with the logical shape and layout of
/// each output. Unary and binary entries have no outputs listed: those follow
/// from the inputs, so one entry serves every application of the function.
/// Only an `Op::InLayout` has padded outputs; its placement says what they hold.
#[derive(Clone, Debug, PartialEq)]
pub struct OpEntry {
    /// The op, with its layout when it is an `Op::InLayout`.
    pub op: Op,
    /// The logical shape and layout of each output.
    pub outputs: Vec<(Vec<usize>, Layout)>,
}

impl OpEntry {
    /// An op placed in storage layouts: `inner` reads `inputs` (logical shapes
    /// in layouts) and writes its outputs in `out_layouts` holding `out_pads`.
    pub fn in_layout(
        inner: Op,
        inputs: Vec<(Layout, Vec<usize>)>,
        outputs: Vec<(Layout, PadValue)>,
        dtypes: &[DType],
    ) -> Result<OpEntry, NodeError> {
        let logical: Vec<ValueType> = inputs
            .iter()
            .zip(dtypes)
            .map(|((_, s), &d)| ValueType::new(d, s.clone()))
            .collect();
        let refs: Vec<&ValueType> = logical.iter().collect();
        let outs = infer_outputs(&inner, &refs).map_err(|e| NodeError::Infer(e.to_string()))?;
        if outs.len() != outputs.len() {
            return Err(NodeError::Mismatch(format!(
                "{} outputs placed for {}",
                outputs.len(),
                outs.len()
            )));
        }
        let out_shapes = outs
            .into_iter()
            .zip(&outputs)
            .map(|(t, (l, _))| (t.shape, l.clone()))
            .collect();
        Ok(OpEntry {
            op: Op::InLayout(Box::new(LaidOut {
                inner,
                inputs,
                outputs,
            })),
            outputs: out_shapes,
        })
    }
}

/// A tensor the e-graph takes as given: a graph input or constant, or a value
/// computed outside the rewritten region.
#[derive(Clone, Debug)]
pub struct Source {
    /// The graph value it is.
    pub value: ValueRef,
    /// Its tensor: shape, layout, padding and whether it is constant.
    pub info: TensorInfo,
    /// Its value when it is a float constant of one element (of any rank).
    pub scalar: Option<f32>,
}

/// What the padding of a class holds, and why that is known.
#[derive(Clone, Debug, PartialEq)]
pub struct PadFact {
    /// The value the padding holds.
    pub value: PadValue,
    /// Why it is known (the op or rule that established it).
    pub origin: String,
}

/// A tensor class: logical shape, layout and padding of its physical buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// The element type.
    pub dtype: DType,
    /// The logical shape.
    pub logical: Vec<usize>,
    /// The layout of the physical buffer.
    pub layout: Layout,
    /// Present exactly when the layout pads this shape.
    pub pad: Option<PadFact>,
    /// Computable at compile time (every leaf below is a constant).
    pub is_const: bool,
}

impl TensorInfo {
    /// The shape of the physical (padded, blocked) buffer.
    pub fn physical_shape(&self) -> Vec<usize> {
        self.layout
            .physical_shape(&self.logical)
            .expect("the layout fits the shape (checked when the class was made)")
    }

    /// The size of the physical buffer in bytes.
    pub fn bytes(&self) -> usize {
        let elements = self
            .layout
            .physical_numel(&self.logical)
            .expect("the layout fits the shape (checked when the class was made)");
        elements * self.dtype.size_bytes()
    }

    /// The type of the physical buffer.
    pub fn value_type(&self) -> ValueType {
        ValueType::new(self.dtype, self.physical_shape())
    }

    /// The pad value, `Undef` when nothing is known (or there is no padding).
    pub fn pad_value(&self) -> PadValue {
        self.pad.as_ref().map_or(PadValue::Undef, |p| p.value)
    }
}

/// What a class is.
#[derive(Clone, Debug, PartialEq)]
pub enum Info {
    /// An argument of a transform (layout, pad value, list).
    Atom(Atom),
    /// One tensor.
    Tensor(TensorInfo),
    /// The outputs of an op with several.
    Tuple(Vec<TensorInfo>),
    /// A node that does not type-check (a rule must never build one; the
    /// extractor never picks one).
    Invalid(String),
}

/// What the analysis knows of an e-class.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassData {
    /// What the class is.
    pub info: Info,
    /// Every source layer this class stands for.
    pub spans: Vec<Span>,
    /// A name for the graph node built from this class.
    pub name: Option<String>,
    /// The source model's name for the tensor this class computes, given to
    /// the value built from it (so a rewritten graph keeps the model's names).
    pub value_name: Option<String>,
}

/// The e-class analysis, holding the side tables atoms refer to.
#[derive(Default)]
pub struct LayoutAnalysis {
    /// The ops the `op` nodes refer to, by index.
    pub ops: Vec<OpEntry>,
    /// The entries of `ops` by the hash of their Debug text (two entries
    /// share one index only when that text and the entries are equal).
    op_index: FxHashMap<u64, Vec<usize>>,
    /// The graph inputs and constants, by index.
    pub sources: Vec<Source>,
    /// The crop assumptions `crop` nodes refer to, by index.
    pub assumptions: Vec<Assumption>,
    /// Rule conditions that failed (not merely refused) during rewriting.
    pub failures: Vec<String>,
    /// Every rule application that changed the e-graph, for the report.
    pub firings: Vec<Firing>,
}

/// One rule application that joined its right side to the matched class.
#[derive(Clone, Debug)]
pub struct Firing {
    /// The rule.
    pub rule: String,
    /// The class it matched.
    pub class: Id,
    /// The nodes its left side matched, its root (the node of `class`) last.
    pub lhs: Vec<Lang>,
    /// The node its right side built there; `None` when the right side is a
    /// variable (the class became an existing one).
    pub rhs: Option<Lang>,
    /// The source layers the match covered.
    pub spans: Vec<Span>,
}

/// The e-graph of a planned graph with its layout analysis.
pub type LEGraph = egg::EGraph<Lang, LayoutAnalysis>;

impl LayoutAnalysis {
    /// The table index of an op entry, adding it if new (equal entries share one).
    pub fn intern(&mut self, entry: OpEntry) -> usize {
        // Ops hold floats, so they have no `Hash`; their Debug text, streamed
        // into a hasher rather than a string, tells 0.0 from -0.0 as it should.
        let mut hasher = TextHasher(rustc_hash::FxHasher::default());
        fmt::write(&mut hasher, format_args!("{entry:?}")).expect("hashing cannot fail");
        let same = self.op_index.entry(hasher.0.finish()).or_default();
        if let Some(&k) = same.iter().find(|&&k| self.ops[k] == entry) {
            return k;
        }
        same.push(self.ops.len());
        self.ops.push(entry);
        self.ops.len() - 1
    }
}

/// Feeds formatted text to a hasher.
struct TextHasher(rustc_hash::FxHasher);

impl fmt::Write for TextHasher {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write(s.as_bytes());
        Ok(())
    }
}

/// The pad fact of a layout-`layout` tensor of shape `logical` whose padding
/// holds `value`: none when the layout does not pad the shape.
pub fn pad_fact(
    layout: &Layout,
    logical: &[usize],
    value: PadValue,
    origin: &str,
) -> Option<PadFact> {
    let padded = layout.padded_axes(logical).ok()?;
    (!padded.is_empty()).then(|| PadFact {
        value,
        origin: origin.to_string(),
    })
}

/// Whether a binary op may run on physical buffers in `layout`: numpy
/// broadcasting of the physical shapes means the logical one only when no
/// blocked axis is broadcast.
pub fn broadcast_safe(layout: &Layout, a: &[usize], b: &[usize]) -> bool {
    if layout.is_identity() {
        return true;
    }
    a.len() == layout.rank()
        && b.len() == layout.rank()
        && (0..layout.rank()).all(|i| layout.factors(i).is_empty() || a[i] == b[i])
}

/// A class read as `expected` that is `found`.
fn expected(expected: &'static str, found: impl fmt::Display) -> NodeError {
    NodeError::Expected {
        expected,
        found: found.to_string(),
    }
}

fn atom(eg: &LEGraph, id: Id) -> Result<&Atom, NodeError> {
    match &eg[id].data.info {
        Info::Atom(a) => Ok(a),
        other => Err(expected("an attribute", format!("{other:?}"))),
    }
}

/// The tensor class `id` stands for; an error for any other class.
pub fn tensor_of(eg: &LEGraph, id: Id) -> Result<&TensorInfo, NodeError> {
    match &eg[id].data.info {
        Info::Tensor(t) => Ok(t),
        Info::Invalid(m) => Err(NodeError::Invalid(m.clone())),
        other => Err(expected("a tensor", format!("{other:?}"))),
    }
}

/// The layout atom of class `id`.
pub fn layout_of(eg: &LEGraph, id: Id) -> Result<&Layout, NodeError> {
    match atom(eg, id)? {
        Atom::Layout(l) => Ok(l),
        a => Err(expected("a layout", a)),
    }
}

/// The pad value atom of class `id`.
pub fn pad_of(eg: &LEGraph, id: Id) -> Result<PadValue, NodeError> {
    match atom(eg, id)? {
        Atom::Pad(p) => Ok(*p),
        a => Err(expected("a pad value", a)),
    }
}

/// The list atom of class `id`.
pub fn ints_of(eg: &LEGraph, id: Id) -> Result<&[usize], NodeError> {
    match atom(eg, id)? {
        Atom::Ints(v) => Ok(v),
        a => Err(expected("an integer list", a)),
    }
}

/// The op entry an `op` node's first child refers to.
pub fn entry_of(eg: &LEGraph, id: Id) -> Result<&OpEntry, NodeError> {
    match atom(eg, id)? {
        Atom::Op(k) => eg.analysis.ops.get(*k).ok_or(NodeError::NoEntry {
            table: "op",
            index: *k,
        }),
        a => Err(expected("an op", a)),
    }
}

fn identity_input<'a>(eg: &'a LEGraph, id: Id, what: &str) -> Result<&'a TensorInfo, NodeError> {
    let t = tensor_of(eg, id)?;
    if !t.layout.is_identity() {
        return Err(NodeError::Mismatch(format!(
            "{what} needs a row-major input, got layout {}",
            t.layout
        )));
    }
    Ok(t)
}

/// The value of a float constant class of one element, if it is one.
pub fn scalar_value(eg: &LEGraph, id: Id) -> Option<f32> {
    eg[id].nodes.iter().find_map(|n| match n {
        Lang::Atom(Atom::Source(k)) => eg.analysis.sources[*k].scalar,
        _ => None,
    })
}

/// What an operand of a binary op holds at the padding positions: its pad
/// value, or for a scalar its value (known when it is a constant).
pub fn operand_pad(eg: &LEGraph, id: Id) -> PadValue {
    match &eg[id].data.info {
        Info::Tensor(t) if t.logical.is_empty() => {
            scalar_value(eg, id).map_or(PadValue::Undef, PadValue::Known)
        }
        Info::Tensor(t) => t.pad_value(),
        _ => PadValue::Undef,
    }
}

fn infer(eg: &LEGraph, node: &Lang) -> Result<Info, NodeError> {
    let plain = |dtype, logical: Vec<usize>, is_const| {
        Ok(Info::Tensor(TensorInfo {
            dtype,
            layout: Layout::identity(logical.len())?,
            logical,
            pad: None,
            is_const,
        }))
    };
    match node {
        Lang::Atom(Atom::Source(k)) => eg
            .analysis
            .sources
            .get(*k)
            .map(|s| Info::Tensor(s.info.clone()))
            .ok_or(NodeError::NoEntry {
                table: "source",
                index: *k,
            }),
        Lang::Atom(a) => Ok(Info::Atom(a.clone())),
        Lang::Xform([from, to, pad, x]) => {
            let (from, to, pad, x) = (
                layout_of(eg, *from)?,
                layout_of(eg, *to)?,
                pad_of(eg, *pad)?,
                tensor_of(eg, *x)?,
            );
            if &x.layout != from {
                return Err(NodeError::Mismatch(format!(
                    "transform from {from} applied to a tensor in {}",
                    x.layout
                )));
            }
            to.physical_shape(&x.logical)?;
            Ok(Info::Tensor(TensorInfo {
                pad: pad_fact(to, &x.logical, pad, "written by a layout transform"),
                layout: to.clone(),
                ..x.clone()
            }))
        }
        Lang::Pad([b, e, _, x]) | Lang::Crop([b, e, _, x]) => {
            let (b, e, x) = (
                ints_of(eg, *b)?,
                ints_of(eg, *e)?,
                identity_input(eg, *x, "pad/crop")?,
            );
            if b.len() != x.logical.len() || e.len() != x.logical.len() {
                return Err(NodeError::Mismatch(format!(
                    "amounts {b:?}/{e:?} do not fit shape {:?}",
                    x.logical
                )));
            }
            let grow = matches!(node, Lang::Pad(_));
            let mut logical = Vec::with_capacity(b.len());
            for i in 0..b.len() {
                let d = x.logical[i];
                logical.push(if grow {
                    d + b[i] + e[i]
                } else {
                    d.checked_sub(b[i] + e[i]).ok_or_else(|| {
                        NodeError::Mismatch(format!(
                            "crop {b:?}/{e:?} exceeds shape {:?}",
                            x.logical
                        ))
                    })?
                });
            }
            plain(x.dtype, logical, x.is_const)
        }
        Lang::Unary([k, x]) => {
            let (entry, x) = (entry_of(eg, *k)?, tensor_of(eg, *x)?);
            let Op::Unary(u) = entry.op else {
                return Err(NodeError::Mismatch(format!(
                    "unary node holds {}",
                    entry.op.kind_name()
                )));
            };
            let pad = x.pad.as_ref().map(|p| PadFact {
                value: super::unary_flow(u, p.value),
                origin: p.origin.clone(),
            });
            Ok(Info::Tensor(TensorInfo { pad, ..x.clone() }))
        }
        Lang::Binary([k, ia, ib]) => {
            let (entry, a, b) = (entry_of(eg, *k)?, tensor_of(eg, *ia)?, tensor_of(eg, *ib)?);
            let Op::Binary(op) = entry.op else {
                return Err(NodeError::Mismatch(format!(
                    "binary node holds {}",
                    entry.op.kind_name()
                )));
            };
            // Row-major operands broadcast as numpy says; a scalar broadcasts
            // over any physical buffer; otherwise both operands must share the
            // layout, with no blocked axis broadcast.
            let logical = broadcast_shapes(&a.logical, &b.logical)
                .map_err(|e| NodeError::Mismatch(e.to_string()))?;
            let plain = a.layout.is_identity() && b.layout.is_identity();
            let identity = Layout::identity(logical.len())?;
            let layout = if plain {
                &identity
            } else if a.logical.is_empty() {
                &b.layout
            } else {
                &a.layout
            };
            let scalar_side = a.logical.is_empty() || b.logical.is_empty();
            if !plain
                && !scalar_side
                && (a.layout != b.layout || !broadcast_safe(layout, &a.logical, &b.logical))
            {
                return Err(NodeError::Mismatch(format!(
                    "operands {:?} in {} and {:?} in {} do not broadcast",
                    a.logical, a.layout, b.logical, b.layout
                )));
            }
            let value = super::binary_flow(op, operand_pad(eg, *ia), operand_pad(eg, *ib));
            let origin = match (&a.pad, &b.pad) {
                (Some(p), Some(q)) => format!("{}; {}", p.origin, q.origin),
                (Some(p), None) | (None, Some(p)) => p.origin.clone(),
                (None, None) => String::new(),
            };
            Ok(Info::Tensor(TensorInfo {
                dtype: if op.is_comparison() {
                    DType::Bool
                } else {
                    a.dtype
                },
                pad: pad_fact(layout, &logical, value, &origin),
                layout: layout.clone(),
                logical,
                is_const: a.is_const && b.is_const,
            }))
        }
        Lang::Pool([k, x])
        | Lang::Reshape([k, x])
        | Lang::Transpose([k, x])
        | Lang::Padding([k, x])
        | Lang::Slice([k, x]) => entry_outputs(eg, *k, &[*x]),
        Lang::Concat(ch) | Lang::Conv(ch) | Lang::Other(ch) => match ch.split_first() {
            Some((k, xs)) => entry_outputs(eg, *k, xs),
            None => Err(NodeError::Mismatch("an op node without its op".into())),
        },
        Lang::Get([i, t]) => {
            let Atom::Index(i) = atom(eg, *i)? else {
                return Err(NodeError::Mismatch("get needs an index".into()));
            };
            match &eg[*t].data.info {
                Info::Tuple(ts) => ts
                    .get(*i)
                    .cloned()
                    .map(Info::Tensor)
                    .ok_or_else(|| NodeError::Mismatch(format!("no output {i}"))),
                other => Err(NodeError::Mismatch(format!(
                    "get from a non-tuple {other:?}"
                ))),
            }
        }
    }
}

/// Outputs of a table op: checked against shape inference on the physical inputs.
fn entry_outputs(eg: &LEGraph, k: Id, xs: &[Id]) -> Result<Info, NodeError> {
    let entry = entry_of(eg, k)?;
    let inputs: Vec<&TensorInfo> = xs
        .iter()
        .map(|&x| tensor_of(eg, x))
        .collect::<Result<_, _>>()?;
    let types: Vec<ValueType> = inputs.iter().map(|t| t.value_type()).collect();
    let refs: Vec<&ValueType> = types.iter().collect();
    let inferred = infer_outputs(&entry.op, &refs).map_err(|e| NodeError::Infer(e.to_string()))?;
    if inferred.len() != entry.outputs.len() {
        return Err(NodeError::Mismatch(format!(
            "{} has {} outputs",
            entry.op.kind_name(),
            inferred.len()
        )));
    }
    if let Op::InLayout(l) = &entry.op {
        for (t, (layout, logical)) in inputs.iter().zip(&l.inputs) {
            if &t.layout != layout || &t.logical != logical {
                return Err(NodeError::Mismatch(format!(
                    "placed for {logical:?} in {layout}, given {:?} in {}",
                    t.logical, t.layout
                )));
            }
        }
    }
    let is_const = inputs.iter().all(|t| t.is_const);
    let mut outs = Vec::with_capacity(inferred.len());
    for (ty, (logical, layout)) in inferred.iter().zip(&entry.outputs) {
        if layout.physical_shape(logical).ok().as_ref() != Some(&ty.shape) {
            return Err(NodeError::Mismatch(format!(
                "{} gives {:?}, not {logical:?} in {layout}",
                entry.op.kind_name(),
                ty.shape
            )));
        }
        let value = match &entry.op {
            Op::InLayout(l) => l.outputs[outs.len()].1,
            _ => PadValue::Undef,
        };
        outs.push(TensorInfo {
            dtype: ty.dtype,
            logical: logical.clone(),
            layout: layout.clone(),
            pad: pad_fact(
                layout,
                logical,
                value,
                "written by an op placed in a layout",
            ),
            is_const,
        });
    }
    Ok(if outs.len() == 1 {
        Info::Tensor(outs.remove(0))
    } else {
        Info::Tuple(outs)
    })
}

impl Analysis<Lang> for LayoutAnalysis {
    type Data = ClassData;

    fn make(eg: &LEGraph, enode: &Lang) -> ClassData {
        ClassData {
            info: infer(eg, enode).unwrap_or_else(|e| Info::Invalid(e.to_string())),
            spans: vec![],
            name: None,
            value_name: None,
        }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        let before = a.clone();
        match (&mut a.info, &b.info) {
            (Info::Invalid(_), valid) if !matches!(valid, Info::Invalid(_)) => {
                a.info = valid.clone()
            }
            // Equal buffers: what one node knows about the padding holds for all.
            (Info::Tensor(x), Info::Tensor(y)) => {
                if x.pad.as_ref().is_some_and(|p| p.value == PadValue::Undef) {
                    if let Some(q) = &y.pad {
                        x.pad = Some(q.clone());
                    }
                }
                x.is_const |= y.is_const;
            }
            _ => {}
        }
        if b.spans.iter().any(|s| !a.spans.contains(s)) {
            a.spans = merge_spans([a.spans.as_slice(), b.spans.as_slice()]);
        }
        if a.name.is_none() {
            a.name = b.name.clone();
        }
        if a.value_name.is_none() {
            a.value_name = b.value_name.clone();
        }
        DidMerge(*a != before, *a != b)
    }
}
