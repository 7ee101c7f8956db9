//! ONNX operators to typed graph ops, as a registry: each op family's file
//! holds the import functions of its operators and registers each with one
//! line in its `register`. Inputs that parameterise an op (shapes, axes, pads,
//! bounds) must be constants here and become attributes.

mod attention;
mod composite;
mod context;
mod control;
mod conv;
mod data_dependent;
mod elementwise;
mod integer;
mod logical;
mod loss;
mod masked;
mod matmul;
mod movement;
mod normalize;
mod pool;
mod quantize;
mod recurrent;
mod reduce;
mod registry;
mod resize;
mod scatter;
mod select;
mod source;
mod spectral;
mod text;
mod window;

pub(super) use context::NodeCtx;
pub(super) use data_dependent::data_dependent_op;
use registry::Registry;
use std::sync::LazyLock;

/// Every operator the importer knows, registered once on first use.
pub(super) fn registry() -> &'static Registry {
    static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
        let mut reg = Registry::default();
        attention::register(&mut reg);
        composite::register(&mut reg);
        control::register(&mut reg);
        data_dependent::register(&mut reg);
        conv::register(&mut reg);
        elementwise::register(&mut reg);
        integer::register(&mut reg);
        logical::register(&mut reg);
        loss::register(&mut reg);
        masked::register(&mut reg);
        matmul::register(&mut reg);
        movement::register(&mut reg);
        normalize::register(&mut reg);
        pool::register(&mut reg);
        quantize::register(&mut reg);
        recurrent::register(&mut reg);
        reduce::register(&mut reg);
        resize::register(&mut reg);
        scatter::register(&mut reg);
        select::register(&mut reg);
        source::register(&mut reg);
        spectral::register(&mut reg);
        text::register(&mut reg);
        reg
    });
    &REGISTRY
}

#[cfg(test)]
mod tests {
    use super::registry::AI_ONNX;
    use super::*;
    use crate::frontend::onnx::Env;
    use crate::graph::{Graph, Span};
    use onnx_protobuf::NodeProto;

    /// The operators the importer supports, all of the default domain: the
    /// registry holds exactly these, so the supported set changes only on
    /// purpose (scripts/export_onnx_conformance.py reads this list too).
    const SUPPORTED: &[&str] = &[
        "Abs",
        "DeformConv",
        "Unique",
        "NonMaxSuppression",
        "NonZero",
        "Add",
        "And",
        "ArgMax",
        "ArgMin",
        "Attention",
        "AveragePool",
        "BatchNormalization",
        "BitCast",
        "BitShift",
        "Cast",
        "CastLike",
        "CausalConvWithState",
        "Celu",
        "Clip",
        "Concat",
        "Constant",
        "ConstantOfShape",
        "Conv",
        "ConvTranspose",
        "CumSum",
        "CumProd",
        "DepthToSpace",
        "Det",
        "DFT",
        "STFT",
        "Div",
        "Dropout",
        "Einsum",
        "AffineGrid",
        "Elu",
        "Equal",
        "Erf",
        "Exp",
        "Expand",
        "Flatten",
        "GRU",
        "Gather",
        "Compress",
        "Col2Im",
        "ReverseSequence",
        "RoiAlign",
        "GatherElements",
        "GatherND",
        "Gelu",
        "Gemm",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "Greater",
        "GreaterOrEqual",
        "GridSample",
        "GroupNormalization",
        "HardSigmoid",
        "HardSwish",
        "Hardmax",
        "Identity",
        "If",
        "InstanceNormalization",
        "LRN",
        "LSTM",
        "LayerNormalization",
        "LeakyRelu",
        "Less",
        "LessOrEqual",
        "LinearAttention",
        "Log",
        "Loop",
        "LogSoftmax",
        "MatMul",
        "Max",
        "MaxPool",
        "MaxUnpool",
        "MelWeightMatrix",
        "Mean",
        "Min",
        "Mish",
        "NegativeLogLikelihoodLoss",
        "SoftmaxCrossEntropyLoss",
        "Swish",
        "SwiGLU",
        "Mod",
        "Mul",
        "Neg",
        "Not",
        "OneHot",
        "Or",
        "PRelu",
        "Pad",
        "CenterCropPad",
        "Pow",
        "RNN",
        "Range",
        "Reciprocal",
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "DynamicQuantizeLinear",
        "ConvInteger",
        "MatMulInteger",
        "Round",
        "Floor",
        "Ceil",
        "ReduceMax",
        "ReduceMean",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Relu",
        "Reshape",
        "Resize",
        "RMSNormalization",
        "RotaryEmbedding",
        "ScatterElements",
        "Scatter",
        "ScatterND",
        "Scan",
        "Selu",
        "Shape",
        "Shrink",
        "Sigmoid",
        "Slice",
        "Softmax",
        "Softplus",
        "Softsign",
        "SpaceToDepth",
        "Split",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Sum",
        "Tanh",
        "TensorScatter",
        "TfIdfVectorizer",
        "ThresholdedRelu",
        "Tile",
        "TopK",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Upsample",
        "Where",
        "Xor",
        "Sin",
        "Cos",
        "Tan",
        "Asin",
        "Acos",
        "Atan",
        "Sinh",
        "Cosh",
        "Asinh",
        "Acosh",
        "Atanh",
        "Sign",
        "IsNaN",
        "IsInf",
        "ReduceL1",
        "ReduceL2",
        "ReduceSumSquare",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "Size",
        "EyeLike",
        "HannWindow",
        "HammingWindow",
        "BlackmanWindow",
        "LpNormalization",
        "MeanVarianceNormalization",
        "LpPool",
        "BitwiseAnd",
        "BitwiseOr",
        "BitwiseXor",
        "BitwiseNot",
    ];

    /// The com.microsoft operators onnxruntime's quantizer emits.
    const SUPPORTED_MICROSOFT: &[&str] = &[
        "DynamicQuantizeLSTM",
        "QGemm",
        "QLinearAdd",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearLeakyRelu",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearSoftmax",
        "QLinearWhere",
    ];

    /// The ai.onnx.preview operators.
    const SUPPORTED_PREVIEW: &[&str] = &["FlexAttention"];

    #[test]
    fn the_registry_holds_exactly_the_supported_operators() {
        let mut want: Vec<(&str, &str)> = SUPPORTED.iter().map(|&op| (AI_ONNX, op)).collect();
        want.extend(SUPPORTED_MICROSOFT.iter().map(|&op| ("com.microsoft", op)));
        want.extend(SUPPORTED_PREVIEW.iter().map(|&op| ("ai.onnx.preview", op)));
        want.sort_unstable();
        let have = registry().op_types();
        assert_eq!(have.len(), 190);
        assert_eq!(have, want);
    }

    #[test]
    fn the_default_domain_is_found_by_either_name() {
        assert!(registry().get("", "Conv").is_some());
        assert!(registry().get("ai.onnx", "Conv").is_some());
        assert!(registry().get("com.microsoft", "Conv").is_none());
        assert!(registry().get("", "StringNormalizer").is_none());
    }

    /// Every import function, given a node without inputs or attributes,
    /// returns (an error, mostly) rather than panicking.
    #[test]
    fn every_import_function_returns_on_a_bare_node() {
        for (domain, op) in registry().op_types() {
            let import = registry().get(domain, op).expect("registered");
            let mut node = NodeProto::new();
            node.op_type = op.to_string();
            node.output = vec!["y".into()];
            let span = Span::new("t.onnx", "layer", op, 0);
            let mut g = Graph::new("t");
            let env = Env::for_tests("t.onnx", 13);
            let mut c = NodeCtx {
                node: &node,
                span: &span,
                opset: 13,
                inputs: &[],
                g: &mut g,
                env: &env,
                scope: &Default::default(),
            };
            let _ = import(&mut c);
        }
    }
}
