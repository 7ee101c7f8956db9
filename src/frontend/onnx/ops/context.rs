//! What an import function is given: the node, its inputs, the opset and the
//! graph, with the readers of attributes and constant inputs every family uses.

use crate::frontend::onnx::{add_and_fold, Env, ImportError};
use crate::graph::{BinaryOp, DType, Graph, Op, Reshape, Span, Tensor, ValueRef, ValueType};
use onnx_protobuf::{AttributeProto, NodeProto};
use std::collections::HashMap;

/// A step of an import: its result, or why the node cannot be imported,
/// naming its layer.
pub(in crate::frontend::onnx) type Res<T> = Result<T, ImportError>;

/// One node being imported: the node, its inputs, the model's opset and the
/// graph its ops are added to; for the subgraphs of control flow, what the
/// graph is imported with and every value named in its scope.
pub(in crate::frontend::onnx) struct NodeCtx<'a> {
    pub node: &'a NodeProto,
    pub span: &'a Span,
    pub opset: i64,
    pub inputs: &'a [Option<ValueRef>],
    pub g: &'a mut Graph,
    pub env: &'a Env,
    pub scope: &'a HashMap<String, ValueRef>,
}

/// Where an op of an import goes: an intermediate value, or the node's output.
#[derive(Clone, Copy)]
pub(super) enum Out {
    Inner(&'static str),
    Node,
}

impl Out {
    /// What the values computed on the way to it are named after.
    pub(super) fn label(self) -> &'static str {
        match self {
            Out::Inner(what) => what,
            Out::Node => "output",
        }
    }
}

impl NodeCtx<'_> {
    /// Adds `op` as an intermediate value or as the node's output.
    pub(super) fn add(&mut self, op: Op, inputs: &[ValueRef], out: Out) -> Res<ValueRef> {
        match out {
            Out::Inner(what) => self.emit_inner(op, inputs, what),
            Out::Node => Ok(self.emit(op, inputs)?[0].expect("an op has an output")),
        }
    }

    /// The same node reading `inputs` instead: for an import that rewrites
    /// some inputs (dequantized weights) before the op's own import.
    pub(super) fn with_inputs<'b>(&'b mut self, inputs: &'b [Option<ValueRef>]) -> NodeCtx<'b> {
        NodeCtx {
            node: self.node,
            span: self.span,
            opset: self.opset,
            inputs,
            g: self.g,
            env: self.env,
            scope: self.scope,
        }
    }

    pub(super) fn err(&self, message: impl Into<String>) -> ImportError {
        ImportError::layer(self.span, message)
    }

    pub(super) fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.node.attribute.iter().find(|a| a.name == name)
    }

    /// Checks that attribute `name`, if present, has ONNX attribute type `want`.
    pub(super) fn typed_attr(
        &self,
        name: &str,
        want: i32,
        what: &str,
    ) -> Res<Option<&AttributeProto>> {
        match self.attr(name) {
            Some(a) if a.type_.value() != want => Err(self.err(format!(
                "attribute '{name}' must be {what} (attribute type {want}), got type {}",
                a.type_.value()
            ))),
            other => Ok(other),
        }
    }

    pub(super) fn int(&self, name: &str, default: i64) -> Res<i64> {
        Ok(self.typed_attr(name, 2, "an int")?.map_or(default, |a| a.i))
    }

    pub(super) fn float(&self, name: &str, default: f32) -> Res<f32> {
        Ok(self
            .typed_attr(name, 1, "a float")?
            .map_or(default, |a| a.f))
    }

    pub(super) fn ints(&self, name: &str) -> Res<Option<Vec<i64>>> {
        Ok(self
            .typed_attr(name, 7, "a list of ints")?
            .map(|a| a.ints.clone()))
    }

    pub(super) fn floats(&self, name: &str) -> Res<Option<Vec<f32>>> {
        Ok(self
            .typed_attr(name, 6, "a list of floats")?
            .map(|a| a.floats.clone()))
    }

    pub(super) fn string(&self, name: &str, default: &str) -> Res<String> {
        Ok(self
            .typed_attr(name, 3, "a string")?
            .map_or(default.to_string(), |a| {
                String::from_utf8_lossy(&a.s).into_owned()
            }))
    }

    pub(super) fn bool_attr(&self, name: &str, default: bool) -> Res<bool> {
        Ok(self.int(name, default as i64)? != 0)
    }

    pub(super) fn input(&self, i: usize) -> Res<ValueRef> {
        self.inputs.get(i).copied().flatten().ok_or_else(|| {
            self.err(format!(
                "{} needs input {i}, which is missing",
                self.node.op_type
            ))
        })
    }

    pub(super) fn opt_input(&self, i: usize) -> Option<ValueRef> {
        self.inputs.get(i).copied().flatten()
    }

    pub(super) fn ty(&self, v: ValueRef) -> ValueType {
        self.g.value_type(v).clone()
    }

    /// The value of an optional parameter input, which must be a constant.
    pub(super) fn const_input(&self, i: usize) -> Res<Option<Tensor>> {
        let Some(v) = self.opt_input(i) else {
            return Ok(None);
        };
        match self.g.constant(v) {
            Some(t) => Ok(Some(t.clone())),
            None => Err(ImportError::NotConstant {
                spans: vec![self.span.clone()],
                value: self.node.input[i].clone(),
                message: format!(
                    "input {i} ('{}') must be a constant (computable at import time); dynamic values are not supported",
                    self.node.input[i]
                ),
            }),
        }
    }

    pub(super) fn const_ints(&self, i: usize) -> Res<Option<Vec<i64>>> {
        Ok(self.const_input(i)?.map(|t| t.data.to_i64()))
    }

    /// A rank-relative axis (negative counts from the end) as an index.
    pub(super) fn axis(&self, a: i64, rank: usize) -> Res<usize> {
        let r = rank as i64;
        if a < -r || a >= r {
            return Err(self.err(format!("axis {a} is out of range for rank {rank}")));
        }
        Ok(if a < 0 { (a + r) as usize } else { a as usize })
    }

    pub(super) fn axes(&self, axes: &[i64], rank: usize) -> Res<Vec<usize>> {
        let mut out = Vec::with_capacity(axes.len());
        for &a in axes {
            let a = self.axis(a, rank)?;
            if out.contains(&a) {
                return Err(self.err(format!("axis {a} is repeated in {axes:?}")));
            }
            out.push(a);
        }
        Ok(out)
    }

    pub(super) fn layer(&self) -> String {
        self.span.layer.to_string()
    }

    /// Adds the node's (single or multi-output) op, named after the node's outputs.
    pub(super) fn emit(&mut self, op: Op, inputs: &[ValueRef]) -> Res<Vec<Option<ValueRef>>> {
        let names = self.node.output.clone();
        let layer = self.layer();
        Ok(add_and_fold(self.g, op, &layer, inputs, &names, self.span)?
            .into_iter()
            .map(Some)
            .collect())
    }

    /// Adds the node's op over all of the node's inputs, each of which must be given.
    pub(super) fn emit_all(&mut self, op: Op) -> Res<Vec<Option<ValueRef>>> {
        let inputs = (0..self.inputs.len())
            .map(|i| self.input(i))
            .collect::<Res<Vec<_>>>()?;
        self.emit(op, &inputs)
    }

    /// Adds an intermediate node of a one-to-many conversion.
    pub(super) fn emit_inner(
        &mut self,
        op: Op,
        inputs: &[ValueRef],
        suffix: &str,
    ) -> Res<ValueRef> {
        let name = format!("{}/{suffix}", self.layer());
        Ok(add_and_fold(
            self.g,
            op,
            &name,
            inputs,
            std::slice::from_ref(&name),
            self.span,
        )?[0])
    }

    /// `x` reshaped to `shape` (itself when it has that shape already).
    pub(super) fn reshape_to(
        &mut self,
        x: ValueRef,
        shape: Vec<usize>,
        what: &str,
    ) -> Res<ValueRef> {
        if self.ty(x).shape == shape {
            return Ok(x);
        }
        self.emit_inner(Op::Reshape(Reshape { shape }), &[x], what)
    }

    /// `op` applied to `a` and `b`, an intermediate node named after `what`.
    pub(super) fn binary(
        &mut self,
        op: BinaryOp,
        a: ValueRef,
        b: ValueRef,
        what: &str,
    ) -> Res<ValueRef> {
        self.emit_inner(Op::Binary(op), &[a, b], what)
    }

    /// Refuses a tensor this conversion is about to allocate when it could not fit.
    pub(super) fn check_size(&self, dtype: DType, shape: &[usize]) -> Res<()> {
        let ty = ValueType::new(dtype, shape.to_vec());
        crate::graph::check_value_size(&ty, "the constant", crate::graph::memory_limit())
            .map_err(|e| self.err(e.to_string()))
    }

    /// A constant of this layer, named `what` after it: a value one of the
    /// layer's ops reads.
    pub(super) fn inner_constant(&mut self, what: &str, t: Tensor) -> ValueRef {
        let name = format!("{}/{what}", self.layer());
        self.g.add_constant(&name, t, vec![self.span.clone()])
    }

    pub(super) fn constant(&mut self, t: Tensor) -> Vec<Option<ValueRef>> {
        let name = self
            .node
            .output
            .first()
            .cloned()
            .unwrap_or_else(|| self.layer());
        vec![Some(self.g.add_constant(&name, t, vec![self.span.clone()]))]
    }
}

/// Non-negative dimensions from i64 values.
pub(super) fn dims(c: &NodeCtx, v: &[i64], what: &str) -> Res<Vec<usize>> {
    v.iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| c.err(format!("{what} {v:?} has a negative entry")))
        })
        .collect()
}

impl crate::frontend::compose::LayerBuilder for NodeCtx<'_> {
    type Error = ImportError;
    fn step(&mut self, op: Op, inputs: &[ValueRef], what: &str) -> Res<ValueRef> {
        self.emit_inner(op, inputs, what)
    }
    fn layer_constant(&mut self, what: &str, t: Tensor) -> ValueRef {
        self.inner_constant(what, t)
    }
    fn value_type(&self, v: ValueRef) -> ValueType {
        self.ty(v)
    }
    fn layer_error(&self, message: String) -> ImportError {
        self.err(message)
    }
}
