//! Half precision as the runtime computes it: f16 values widen to f32; and
//! quantized layers, which compute in float on their quantization grid.
//!
//! The native kernels compute in f32. A model stored in f16 runs on them when
//! every f16 value is widened: f16 constants become f32, casts to f16 become casts
//! to f32 (a cast between equal types, an identity), and the runtime converts the
//! f16 inputs on the way in and rounds the outputs back to f16 on the way out.
//! Intermediate values keep f32 precision, which is at least as accurate as
//! rounding each to f16.

use super::{DType, Graph, Op, UnaryOp};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Source operators of quantized models (ONNX): their layers run in float.
const QUANTIZED_OPS: [&str; 18] = [
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearConv",
    "QLinearMatMul",
    "QLinearAdd",
    "QLinearMul",
    "QLinearSigmoid",
    "QLinearLeakyRelu",
    "QLinearSoftmax",
    "QLinearWhere",
    "QLinearConcat",
    "QLinearAveragePool",
    "QLinearGlobalAveragePool",
    "QGemm",
    "DynamicQuantizeLinear",
    "ConvInteger",
    "MatMulInteger",
    "DynamicQuantizeLSTM",
];

impl Graph {
    /// The source layers that are quantized and run in float here: the
    /// quantized operators, and layers whose output a rounding no source
    /// Round (or TFLite ROUND) asked for puts on its grid (quantized TFLite
    /// tensors).
    pub fn quantized_layers(&self) -> BTreeSet<Arc<str>> {
        let mut layers = BTreeSet::new();
        for id in self.node_ids() {
            let node = self.node(id);
            // Planning folds a rounding onto a grid into one QuantizeDequantize,
            // and may lay it out.
            let grid = matches!(
                node.op.logical(),
                Op::Unary(UnaryOp::Round | UnaryOp::QuantizeDequantize { .. })
            );
            layers.extend(
                node.spans
                    .iter()
                    .filter(|s| {
                        QUANTIZED_OPS.contains(&&*s.op_type)
                            || (grid && !s.op_type.eq_ignore_ascii_case("round"))
                    })
                    .map(|s| s.layer.clone()),
            );
        }
        layers
    }

    /// A copy of the graph with every f16 value widened to f32, or `None` when
    /// the graph holds no f16 value.
    pub fn widened_f16(&self) -> Option<Graph> {
        let has_f16 = self.node_ids().into_iter().any(|id| {
            let node = self.node(id);
            node.outputs.iter().any(|v| v.ty.dtype == DType::F16)
                || matches!(&node.op, Op::Cast(c) if c.to == DType::F16)
        });
        if !has_f16 {
            return None;
        }
        let mut g = self.clone();
        for id in g.node_ids() {
            let input_is_f32 = g
                .node_inputs(id)
                .first()
                .is_some_and(|&v| widen(g.value_type(v).dtype) == DType::F32);
            let node = g.node_mut(id);
            for v in &mut node.outputs {
                v.ty.dtype = widen(v.ty.dtype);
            }
            match &mut node.op {
                Op::Constant(t) if t.dtype() == DType::F16 => *t = t.cast(DType::F32),
                Op::Cast(c) => {
                    c.to = widen(c.to);
                    if c.to == DType::F32 && input_is_f32 {
                        node.op = Op::Identity;
                    }
                }
                _ => {}
            }
        }
        Some(g)
    }
}

fn widen(d: DType) -> DType {
    match d {
        DType::F16 => DType::F32,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use crate::graph::*;

    #[test]
    fn f16_values_constants_and_casts_widen_to_f32() {
        let mut g = Graph::new("half");
        let x = g.add_input("x", ValueType::new(DType::F16, vec![2]), vec![]);
        let c = g.add_constant(
            "c",
            Tensor::new(vec![2], TensorData::from_f64(DType::F16, vec![1.0, 2.0])),
            vec![],
        );
        let add = g
            .add_node(Op::Binary(BinaryOp::Add), "add", &[x, c], &[], vec![])
            .unwrap();
        let add = ValueRef::new(add, 0);
        let up = g
            .add_node(
                Op::Cast(Cast {
                    to: DType::F32,
                    saturate: true,
                }),
                "up",
                &[add],
                &[],
                vec![],
            )
            .unwrap();
        let up = ValueRef::new(up, 0);
        let relu = g
            .add_node(Op::Unary(UnaryOp::Relu), "relu", &[up], &[], vec![])
            .unwrap();
        let down = g
            .add_node(
                Op::Cast(Cast {
                    to: DType::F16,
                    saturate: true,
                }),
                "down",
                &[ValueRef::new(relu, 0)],
                &[],
                vec![],
            )
            .unwrap();
        g.set_outputs(vec![ValueRef::new(down, 0)]);

        let w = g.widened_f16().expect("the graph holds f16 values");
        for id in w.node_ids() {
            let node = w.node(id);
            assert!(
                node.outputs.iter().all(|v| v.ty.dtype == DType::F32),
                "{}",
                node.name
            );
            if let Op::Constant(t) = &node.op {
                assert_eq!(*t.data, TensorData::F32(vec![1.0, 2.0]));
            }
        }
        assert_eq!(w.node(up.node).op, Op::Identity);
        assert_eq!(w.node(down).op, Op::Identity);
        // An all-f32 graph is left alone.
        assert!(w.widened_f16().is_none());
    }
}
