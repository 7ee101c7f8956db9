//! The types a model declares for its graph inputs and outputs: an input's
//! shape bound from the import options, an output's checked against what the
//! graph computes.

use super::{dtype_from_onnx, ImportOptions, TensorProtoError};
use crate::frontend::Dim;
use crate::graph::{DType, ValueSizeError, ValueType};
use onnx_protobuf::{type_proto, ValueInfoProto};

/// Why a declared type cannot be used (the caller names the input or output).
#[derive(Debug, thiserror::Error)]
pub enum DeclaredTypeError {
    /// A sequence, map or optional value.
    #[error("only tensor values are supported (not sequences, maps or optionals)")]
    NotATensor,
    /// An element type ONNX does not define, or one we do not import.
    #[error(transparent)]
    DType(#[from] TensorProtoError),
    /// A dimension below zero.
    #[error("negative dimension {0}")]
    NegativeDim(i64),
    /// An input without a shape, and none given.
    #[error("has no declared shape; give one with --input-shape {input}=D1,D2,...")]
    NoShape {
        /// The input.
        input: String,
    },
    /// A given shape of another rank than the declared one.
    #[error("the given shape {given:?} has rank {}, the model declares rank {declared}", given.len())]
    Rank {
        /// The shape given.
        given: Vec<usize>,
        /// The declared rank.
        declared: usize,
    },
    /// A given shape that differs from a static declared dimension.
    #[error(
        "the given shape {given:?} differs from the model's static dimension {axis} ({declared})"
    )]
    StaticDim {
        /// The shape given.
        given: Vec<usize>,
        /// The axis.
        axis: usize,
        /// Its declared extent.
        declared: usize,
    },
    /// A symbolic or unknown dimension that nothing binds.
    #[error(
        "dimension {axis} {}has no value; give the input's shape with --input-shape {input}=D1,D2,...",
        symbol.as_ref().map_or(String::new(), |p| format!("is symbolic ('{p}') and "))
    )]
    Unbound {
        /// The axis.
        axis: usize,
        /// Its `dim_param`, if it has one.
        symbol: Option<String>,
        /// The input.
        input: String,
    },
    /// An output declared with another element type than the graph computes.
    #[error("declared element type code {code} but the graph computes {computed}")]
    ComputedDType {
        /// The declared ONNX element type code.
        code: i32,
        /// The type computed.
        computed: DType,
    },
    /// An output declared with static dimensions the graph does not compute.
    #[error("declared shape [{declared}] but the graph computes {computed:?}")]
    ComputedShape {
        /// The declared dimensions, symbolic ones by name.
        declared: String,
        /// The shape computed.
        computed: Vec<usize>,
    },
    /// An input too large for the memory limit.
    #[error(transparent)]
    Size(#[from] ValueSizeError),
}

/// The element type and dimensions a value is declared with.
pub(super) fn declared(
    vi: &ValueInfoProto,
) -> Result<(DType, Option<Vec<Dim>>), DeclaredTypeError> {
    let Some(type_proto::Value::TensorType(tt)) = vi.type_.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Err(DeclaredTypeError::NotATensor);
    };
    let dtype = dtype_from_onnx(tt.elem_type)?;
    let Some(shape) = tt.shape.as_ref() else {
        return Ok((dtype, None));
    };
    let mut dims = Vec::with_capacity(shape.dim.len());
    for d in &shape.dim {
        use onnx_protobuf::tensor_shape_proto::dimension::Value;
        dims.push(match &d.value {
            // onnxruntime reads -1 as a free dimension, as exporters write it.
            Some(Value::DimValue(-1)) => Dim::Unknown,
            Some(Value::DimValue(v)) => {
                Dim::Static(usize::try_from(*v).map_err(|_| DeclaredTypeError::NegativeDim(*v))?)
            }
            Some(Value::DimParam(p)) if !p.is_empty() => Dim::Symbolic(p.clone()),
            _ => Dim::Unknown,
        });
    }
    Ok((dtype, Some(dims)))
}

/// The type of a graph input: its declared shape with every symbolic dimension
/// bound by `opts` (a whole `input_shapes` entry, or `dim_values` by name). An
/// unbound one is an error naming the input and the dimension, never a guess.
pub(super) fn input_type(
    vi: &ValueInfoProto,
    opts: &ImportOptions,
) -> Result<ValueType, DeclaredTypeError> {
    let (dtype, dims) = declared(vi)?;
    let given = opts.input_shapes.get(&vi.name);
    let Some(dims) = dims else {
        return match given {
            Some(shape) => Ok(ValueType::new(dtype, shape.clone())),
            None => Err(DeclaredTypeError::NoShape {
                input: vi.name.clone(),
            }),
        };
    };
    if let Some(shape) = given {
        if shape.len() != dims.len() {
            return Err(DeclaredTypeError::Rank {
                given: shape.clone(),
                declared: dims.len(),
            });
        }
        for (k, (d, &n)) in dims.iter().zip(shape).enumerate() {
            if let Dim::Static(s) = d {
                if *s != n {
                    return Err(DeclaredTypeError::StaticDim {
                        given: shape.clone(),
                        axis: k,
                        declared: *s,
                    });
                }
            }
        }
        return Ok(ValueType::new(dtype, shape.clone()));
    }
    let mut shape = Vec::with_capacity(dims.len());
    for (k, d) in dims.iter().enumerate() {
        shape.push(match d {
            Dim::Static(n) => *n,
            Dim::Symbolic(p) => {
                *opts
                    .dim_values
                    .get(p)
                    .ok_or_else(|| DeclaredTypeError::Unbound {
                        axis: k,
                        symbol: Some(p.clone()),
                        input: vi.name.clone(),
                    })?
            }
            Dim::Unknown => {
                return Err(DeclaredTypeError::Unbound {
                    axis: k,
                    symbol: None,
                    input: vi.name.clone(),
                })
            }
        });
    }
    Ok(ValueType::new(dtype, shape))
}

/// Checks an inferred type against the static dims and dtype a model declares.
pub(super) fn check_declared_type(
    vi: &ValueInfoProto,
    inferred: &ValueType,
) -> Result<(), DeclaredTypeError> {
    let Some(type_proto::Value::TensorType(tt)) = vi.type_.as_ref().and_then(|t| t.value.as_ref())
    else {
        return Ok(());
    };
    if tt.elem_type != 0 && dtype_from_onnx(tt.elem_type).ok() != Some(inferred.dtype) {
        return Err(DeclaredTypeError::ComputedDType {
            code: tt.elem_type,
            computed: inferred.dtype,
        });
    }
    let (_, Some(dims)) = declared(vi)? else {
        return Ok(());
    };
    let static_dims_match = dims.len() == inferred.shape.len()
        && dims
            .iter()
            .zip(&inferred.shape)
            .all(|(d, &n)| !matches!(d, Dim::Static(s) if *s != n));
    if !static_dims_match {
        let text: Vec<String> = dims.iter().map(Dim::to_string).collect();
        return Err(DeclaredTypeError::ComputedShape {
            declared: text.join(", "),
            computed: inferred.shape.clone(),
        });
    }
    Ok(())
}
