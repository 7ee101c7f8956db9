//! Read-only access to TFLite flatbuffers (schema version 3, file identifier "TFL3").
//!
//! Hand-written accessors for the tables and fields the importer reads. Field ids follow
//! declaration order in TFLite's `schema.fbs` (a union takes two ids: its `_type` field,
//! then its value), and a field's vtable slot is `4 + 2 * id`. Every table implements
//! `Verifiable` over exactly the fields it exposes, so `root` runs the flatbuffers verifier
//! over everything an accessor can reach before anything is read: a corrupt or truncated
//! file is an error, never an out-of-bounds read.

use flatbuffers::{
    Follow, ForwardsUOffset, InvalidFlatbuffer, Table, Vector, Verifiable, Verifier,
};

type VResult = Result<(), InvalidFlatbuffer>;

const fn slot(id: u16) -> u16 {
    4 + 2 * id
}

/// Declares table wrappers: `field(id): scalar T = default`, `field(id): ptr T` (an offset
/// to a string, vector or table), `field(id): options T` (the value of the
/// `BuiltinOptions` union, whose `_type` field has id `id - 1`) or `field(id): indices T`
/// (the value of a `SparseIndexVector` union, its `_type` field likewise at `id - 1`).
macro_rules! tables {
    ($( $(#[$doc:meta])* $name:ident { $( $field:ident ($id:literal): $kind:ident $ty:ty $(= $default:expr)? ),* $(,)? } )*) => { $(
        #[doc = concat!("The `", stringify!($name), "` table of the TFLite schema.")]
        $(#[$doc])*
        #[derive(Clone, Copy, Debug)]
        pub struct $name<'a>(Table<'a>);

        impl<'a> Follow<'a> for $name<'a> {
            type Inner = $name<'a>;
            unsafe fn follow(buf: &'a [u8], loc: usize) -> Self::Inner {
                // SAFETY: the caller guarantees a table at `loc` (the verifier checked it).
                $name(unsafe { Table::new(buf, loc) })
            }
        }

        impl<'a> Verifiable for $name<'a> {
            fn run_verifier(v: &mut Verifier, pos: usize) -> VResult {
                let tv = v.visit_table(pos)?;
                $( let tv = tables!(@visit tv, $field, $id, $kind $ty)?; )*
                tv.finish();
                Ok(())
            }
        }

        impl<'a> $name<'a> {
            $( tables!(@get $field, $id, $kind $ty $(= $default)?); )*
        }
    )* };
    (@visit $tv:ident, $field:ident, $id:literal, scalar $ty:ty) => {
        $tv.visit_field::<$ty>(stringify!($field), slot($id), false)
    };
    (@visit $tv:ident, $field:ident, $id:literal, ptr $ty:ty) => {
        $tv.visit_field::<ForwardsUOffset<$ty>>(stringify!($field), slot($id), false)
    };
    (@visit $tv:ident, $field:ident, $id:literal, indices $ty:ty) => {
        $tv.visit_union::<u8, _>(
            concat!(stringify!($field), "_type"),
            slot($id - 1),
            stringify!($field),
            slot($id),
            false,
            verify_sparse_index_vector,
        )
    };
    (@visit $tv:ident, $field:ident, $id:literal, options $ty:ty) => {
        $tv.visit_union::<u8, _>(
            concat!(stringify!($field), "_type"),
            slot($id - 1),
            stringify!($field),
            slot($id),
            false,
            verify_builtin_options,
        )
    };
    (@get $field:ident, $id:literal, scalar $ty:ty = $default:expr) => {
        #[doc = concat!("The `", stringify!($field), "` field (", stringify!($default), " when absent).")]
        pub fn $field(&self) -> $ty {
            // SAFETY: the verifier checked that this slot, if present, holds a `$ty`.
            unsafe { self.0.get::<$ty>(slot($id), Some($default)) }.unwrap_or($default)
        }
    };
    (@get $field:ident, $id:literal, $kind:ident $ty:ty) => {
        #[doc = concat!("The `", stringify!($field), "` field, when present.")]
        pub fn $field(&self) -> Option<$ty> {
            // SAFETY: the verifier checked that this slot, if present, holds an offset to a `$ty`.
            unsafe { self.0.get::<ForwardsUOffset<$ty>>(slot($id), None) }
        }
    };
}

tables! {
    /// The root table.
    Model {
        version(0): scalar u32 = 0,
        operator_codes(1): ptr Vector<'a, ForwardsUOffset<OperatorCode<'a>>>,
        subgraphs(2): ptr Vector<'a, ForwardsUOffset<SubGraph<'a>>>,
        description(3): ptr &'a str,
        buffers(4): ptr Vector<'a, ForwardsUOffset<Buffer<'a>>>,
    }
    SubGraph {
        tensors(0): ptr Vector<'a, ForwardsUOffset<Tensor<'a>>>,
        inputs(1): ptr Vector<'a, i32>,
        outputs(2): ptr Vector<'a, i32>,
        operators(3): ptr Vector<'a, ForwardsUOffset<Operator<'a>>>,
        name(4): ptr &'a str,
    }
    Tensor {
        shape(0): ptr Vector<'a, i32>,
        tensor_type(1): scalar i8 = 0,
        buffer(2): scalar u32 = 0,
        name(3): ptr &'a str,
        quantization(4): ptr QuantizationParameters<'a>,
        // Set when `buffer` holds only the stored (non-zero) values of the dense `shape`.
        sparsity(6): ptr SparsityParameters<'a>,
        // -1 where a dimension is only known at run time (`shape` is then a placeholder).
        shape_signature(7): ptr Vector<'a, i32>,
    }
    /// How a sparse tensor's stored values map onto its dense shape.
    SparsityParameters {
        traversal_order(0): ptr Vector<'a, i32>,
        block_map(1): ptr Vector<'a, i32>,
        dim_metadata(2): ptr Vector<'a, ForwardsUOffset<DimensionMetadata<'a>>>,
    }
    /// One level of a sparse tensor in traversal order: DENSE (0) of `dense_size`, or
    /// SPARSE_CSR (1) with `array_segments` and `array_indices`.
    DimensionMetadata {
        format(0): scalar i8 = 0,
        dense_size(1): scalar i32 = 0,
        array_segments_type(2): scalar u8 = 0,
        array_segments(3): indices Table<'a>,
        array_indices_type(4): scalar u8 = 0,
        array_indices(5): indices Table<'a>,
    }
    Int32Vector {
        values(0): ptr Vector<'a, i32>,
    }
    Uint16Vector {
        values(0): ptr Vector<'a, u16>,
    }
    Uint8Vector {
        values(0): ptr Vector<'a, u8>,
    }
    QuantizationParameters {
        scale(2): ptr Vector<'a, f32>,
        zero_point(3): ptr Vector<'a, i64>,
        details_type(4): scalar u8 = 0,
        // The axis of per-channel scales and zero points.
        quantized_dimension(6): scalar i32 = 0,
    }
    /// Constant data: inline (`data`), or for models over 2 GB at `offset`/`size` in the file.
    Buffer {
        data(0): ptr Vector<'a, u8>,
        offset(1): scalar u64 = 0,
        size(2): scalar u64 = 0,
    }
    OperatorCode {
        deprecated_builtin_code(0): scalar i8 = 0,
        custom_code(1): ptr &'a str,
        version(2): scalar i32 = 1,
        builtin_code(3): scalar i32 = 0,
    }
    Operator {
        opcode_index(0): scalar u32 = 0,
        inputs(1): ptr Vector<'a, i32>,
        outputs(2): ptr Vector<'a, i32>,
        builtin_options_type(3): scalar u8 = 0,
        builtin_options(4): options Table<'a>,
        // A custom operator's options, in a format of its own.
        custom_options(5): ptr Vector<'a, u8>,
    }
    Conv2DOptions {
        padding(0): scalar i8 = 0,
        stride_w(1): scalar i32 = 0,
        stride_h(2): scalar i32 = 0,
        fused_activation_function(3): scalar i8 = 0,
        dilation_w_factor(4): scalar i32 = 1,
        dilation_h_factor(5): scalar i32 = 1,
    }
    DepthwiseConv2DOptions {
        padding(0): scalar i8 = 0,
        stride_w(1): scalar i32 = 0,
        stride_h(2): scalar i32 = 0,
        depth_multiplier(3): scalar i32 = 0,
        fused_activation_function(4): scalar i8 = 0,
        dilation_w_factor(5): scalar i32 = 1,
        dilation_h_factor(6): scalar i32 = 1,
    }
    Pool2DOptions {
        padding(0): scalar i8 = 0,
        stride_w(1): scalar i32 = 0,
        stride_h(2): scalar i32 = 0,
        filter_width(3): scalar i32 = 0,
        filter_height(4): scalar i32 = 0,
        fused_activation_function(5): scalar i8 = 0,
    }
    FullyConnectedOptions {
        fused_activation_function(0): scalar i8 = 0,
        weights_format(1): scalar i8 = 0,
        keep_num_dims(2): scalar bool = false,
        asymmetric_quantize_inputs(3): scalar bool = false,
    }
    SoftmaxOptions {
        beta(0): scalar f32 = 0.0,
    }
    ConcatenationOptions {
        axis(0): scalar i32 = 0,
        fused_activation_function(1): scalar i8 = 0,
    }
    /// Shared by ADD, SUB, MUL and DIV: the fused activation is field 0 of each.
    ArithmeticOptions {
        fused_activation_function(0): scalar i8 = 0,
    }
    ReshapeOptions {
        new_shape(0): ptr Vector<'a, i32>,
    }
    ReducerOptions {
        keep_dims(0): scalar bool = false,
    }
    SqueezeOptions {
        squeeze_dims(0): ptr Vector<'a, i32>,
    }
    StridedSliceOptions {
        begin_mask(0): scalar i32 = 0,
        end_mask(1): scalar i32 = 0,
        ellipsis_mask(2): scalar i32 = 0,
        new_axis_mask(3): scalar i32 = 0,
        shrink_axis_mask(4): scalar i32 = 0,
        offset(5): scalar bool = false,
    }
    ResizeBilinearOptions {
        align_corners(2): scalar bool = false,
        half_pixel_centers(3): scalar bool = false,
    }
    ResizeNearestNeighborOptions {
        align_corners(0): scalar bool = false,
        half_pixel_centers(1): scalar bool = false,
    }
    BatchMatMulOptions {
        adj_x(0): scalar bool = false,
        adj_y(1): scalar bool = false,
    }
    LeakyReluOptions {
        alpha(0): scalar f32 = 0.0,
    }
    GeluOptions {
        approximate(0): scalar bool = false,
    }
    ShapeOptions {
        out_type(0): scalar i8 = 2,
    }
    PackOptions {
        values_count(0): scalar i32 = 0,
        axis(1): scalar i32 = 0,
    }
    UnpackOptions {
        num(0): scalar i32 = 0,
        axis(1): scalar i32 = 0,
    }
    GatherOptions {
        axis(0): scalar i32 = 0,
        batch_dims(1): scalar i32 = 0,
    }
    /// SplitOptions and SplitVOptions.
    SplitOptions {
        num_splits(0): scalar i32 = 0,
    }
    /// DepthToSpaceOptions and SpaceToDepthOptions.
    DepthToSpaceOptions {
        block_size(0): scalar i32 = 0,
    }
    /// REFLECT (0) leaves the edge out of the mirror image, SYMMETRIC (1)
    /// repeats it.
    MirrorPadOptions {
        mode(0): scalar i8 = 0,
    }
    OneHotOptions {
        axis(0): scalar i32 = 0,
    }
    CumsumOptions {
        exclusive(0): scalar bool = false,
        reverse(1): scalar bool = false,
    }
    LocalResponseNormalizationOptions {
        radius(0): scalar i32 = 0,
        bias(1): scalar f32 = 0.0,
        alpha(2): scalar f32 = 0.0,
        beta(3): scalar f32 = 0.0,
    }
    L2NormOptions {
        fused_activation_function(0): scalar i8 = 0,
    }
    TransposeConvOptions {
        padding(0): scalar i8 = 0,
        stride_w(1): scalar i32 = 0,
        stride_h(2): scalar i32 = 0,
        fused_activation_function(3): scalar i8 = 0,
    }
    /// The cell and output activation is the fused activation function; a clip
    /// of 0 is none.
    UnidirectionalSequenceLSTMOptions {
        fused_activation_function(0): scalar i8 = 0,
        cell_clip(1): scalar f32 = 0.0,
        proj_clip(2): scalar f32 = 0.0,
        time_major(3): scalar bool = false,
        asymmetric_quantize_inputs(4): scalar bool = false,
        diagonal_recurrent_tensors(5): scalar bool = false,
    }
    /// As UnidirectionalSequenceLSTMOptions; time major unless it says otherwise.
    BidirectionalSequenceLSTMOptions {
        fused_activation_function(0): scalar i8 = 0,
        cell_clip(1): scalar f32 = 0.0,
        proj_clip(2): scalar f32 = 0.0,
        merge_outputs(3): scalar bool = false,
        time_major(4): scalar bool = true,
        asymmetric_quantize_inputs(5): scalar bool = false,
    }
    /// UNIDIRECTIONAL_SEQUENCE_RNN's options.
    SequenceRNNOptions {
        time_major(0): scalar bool = false,
        fused_activation_function(1): scalar i8 = 0,
        asymmetric_quantize_inputs(2): scalar bool = false,
    }
}

/// An options table that is a variant of the `BuiltinOptions` union.
pub trait BuiltinOptions<'a>: Sized {
    /// The union discriminants that select this table.
    const UNION_TYPES: &'static [u8];
    /// The options table read from the union's table.
    fn from_table(t: Table<'a>) -> Self;
}

/// Registers option tables with their `BuiltinOptions` discriminants, and verifies
/// union values of those types (other variants are never read, so not verified).
macro_rules! builtin_options {
    ($( $name:ident = [$($code:literal),+] ),* $(,)?) => {
        $( impl<'a> BuiltinOptions<'a> for $name<'a> {
            const UNION_TYPES: &'static [u8] = &[$($code),+];
            fn from_table(t: Table<'a>) -> Self {
                $name(t)
            }
        } )*

        fn verify_builtin_options(key: u8, v: &mut Verifier, pos: usize) -> VResult {
            match key {
                $( $($code)|+ => v.verify_union_variant::<ForwardsUOffset<$name>>(stringify!($name), pos), )*
                _ => Ok(()),
            }
        }
    };
}

builtin_options! {
    Conv2DOptions = [1],
    DepthwiseConv2DOptions = [2],
    Pool2DOptions = [5],
    FullyConnectedOptions = [8],
    SoftmaxOptions = [9],
    ConcatenationOptions = [10],
    // AddOptions, MulOptions, SubOptions, DivOptions.
    ArithmeticOptions = [11, 21, 28, 29],
    ResizeBilinearOptions = [15],
    ReshapeOptions = [17],
    ReducerOptions = [27],
    SqueezeOptions = [30],
    StridedSliceOptions = [32],
    ResizeNearestNeighborOptions = [74],
    ShapeOptions = [55],
    PackOptions = [59],
    UnpackOptions = [64],
    GatherOptions = [23],
    // SplitOptions, SplitVOptions.
    SplitOptions = [35, 79],
    TransposeConvOptions = [49],
    // DepthToSpaceOptions, SpaceToDepthOptions.
    DepthToSpaceOptions = [94, 19],
    MirrorPadOptions = [77],
    CumsumOptions = [102],
    OneHotOptions = [61],
    LocalResponseNormalizationOptions = [13],
    L2NormOptions = [12],
    LeakyReluOptions = [75],
    BatchMatMulOptions = [101],
    GeluOptions = [116],
    SequenceRNNOptions = [31],
    BidirectionalSequenceLSTMOptions = [69],
    UnidirectionalSequenceLSTMOptions = [71],
}

/// Verifies the value of a `SparseIndexVector` union.
fn verify_sparse_index_vector(key: u8, v: &mut Verifier, pos: usize) -> VResult {
    match key {
        1 => v.verify_union_variant::<ForwardsUOffset<Int32Vector>>("Int32Vector", pos),
        2 => v.verify_union_variant::<ForwardsUOffset<Uint16Vector>>("Uint16Vector", pos),
        3 => v.verify_union_variant::<ForwardsUOffset<Uint8Vector>>("Uint8Vector", pos),
        _ => Ok(()),
    }
}

/// The index array of a `SparseIndexVector` union, whatever its element type.
#[derive(Clone, Copy, Debug)]
pub enum IndexVector<'a> {
    /// `Int32Vector`.
    I32(Vector<'a, i32>),
    /// `Uint16Vector`.
    U16(Vector<'a, u16>),
    /// `Uint8Vector`.
    U8(Vector<'a, u8>),
}

impl IndexVector<'_> {
    /// The number of entries.
    pub fn len(&self) -> usize {
        match self {
            IndexVector::I32(v) => v.len(),
            IndexVector::U16(v) => v.len(),
            IndexVector::U8(v) => v.len(),
        }
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`; `None` when `i` is out of range or the entry is negative.
    pub fn get(&self, i: usize) -> Option<usize> {
        if i >= self.len() {
            return None;
        }
        match self {
            IndexVector::I32(v) => usize::try_from(v.get(i)).ok(),
            IndexVector::U16(v) => Some(v.get(i) as usize),
            IndexVector::U8(v) => Some(v.get(i) as usize),
        }
    }
}

impl<'a> DimensionMetadata<'a> {
    /// Where each parent position's run of stored entries starts and ends.
    pub fn segments(&self) -> Option<IndexVector<'a>> {
        index_vector(self.array_segments_type(), self.array_segments()?)
    }

    /// The coordinate of each stored entry along this level.
    pub fn indices(&self) -> Option<IndexVector<'a>> {
        index_vector(self.array_indices_type(), self.array_indices()?)
    }
}

/// The union value `t` of type `key` as an index array (`None` for NONE or an unknown type).
fn index_vector(key: u8, t: Table<'_>) -> Option<IndexVector<'_>> {
    Some(match key {
        1 => IndexVector::I32(Int32Vector(t).values()?),
        2 => IndexVector::U16(Uint16Vector(t).values()?),
        3 => IndexVector::U8(Uint8Vector(t).values()?),
        _ => return None,
    })
}

impl<'a> Operator<'a> {
    /// The builtin options as table `O`, if the union holds that variant.
    pub fn options<O: BuiltinOptions<'a>>(&self) -> Option<O> {
        if !O::UNION_TYPES.contains(&self.builtin_options_type()) {
            return None;
        }
        self.builtin_options().map(O::from_table)
    }
}

impl OperatorCode<'_> {
    /// The builtin operator code: files before schema 3a carry only the byte-wide
    /// `deprecated_builtin_code`; newer files set `builtin_code` and clamp the deprecated
    /// field to 127 (PLACEHOLDER_FOR_GREATER_OP_CODES), so the larger of the two is right
    /// for both.
    pub fn code(&self) -> i32 {
        self.builtin_code()
            .max(self.deprecated_builtin_code() as i32)
    }
}

/// Verifies `buf` as a TFLite model and returns its root table.
pub fn root(buf: &[u8]) -> Result<Model<'_>, InvalidFlatbuffer> {
    flatbuffers::root::<Model>(buf)
}

/// The name of a builtin operator code (`BuiltinOperator` in schema.fbs), if it has one.
pub fn builtin_name(code: i32) -> Option<&'static str> {
    usize::try_from(code)
        .ok()
        .and_then(|c| BUILTIN_NAMES.get(c))
        .copied()
}

/// `BuiltinOperator` names by code, 0..=209, as TFLite's schema.fbs lists them.
const BUILTIN_NAMES: [&str; 210] = [
    "ADD",
    "AVERAGE_POOL_2D",
    "CONCATENATION",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "DEPTH_TO_SPACE",
    "DEQUANTIZE",
    "EMBEDDING_LOOKUP",
    "FLOOR",
    "FULLY_CONNECTED",
    "HASHTABLE_LOOKUP",
    "L2_NORMALIZATION",
    "L2_POOL_2D",
    "LOCAL_RESPONSE_NORMALIZATION",
    "LOGISTIC",
    "LSH_PROJECTION",
    "LSTM",
    "MAX_POOL_2D",
    "MUL",
    "RELU",
    "RELU_N1_TO_1",
    "RELU6",
    "RESHAPE",
    "RESIZE_BILINEAR",
    "RNN",
    "SOFTMAX",
    "SPACE_TO_DEPTH",
    "SVDF",
    "TANH",
    "CONCAT_EMBEDDINGS",
    "SKIP_GRAM",
    "CALL",
    "CUSTOM",
    "EMBEDDING_LOOKUP_SPARSE",
    "PAD",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "GATHER",
    "BATCH_TO_SPACE_ND",
    "SPACE_TO_BATCH_ND",
    "TRANSPOSE",
    "MEAN",
    "SUB",
    "DIV",
    "SQUEEZE",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "STRIDED_SLICE",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "EXP",
    "TOPK_V2",
    "SPLIT",
    "LOG_SOFTMAX",
    "DELEGATE",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "CAST",
    "PRELU",
    "MAXIMUM",
    "ARG_MAX",
    "MINIMUM",
    "LESS",
    "NEG",
    "PADV2",
    "GREATER",
    "GREATER_EQUAL",
    "LESS_EQUAL",
    "SELECT",
    "SLICE",
    "SIN",
    "TRANSPOSE_CONV",
    "SPARSE_TO_DENSE",
    "TILE",
    "EXPAND_DIMS",
    "EQUAL",
    "NOT_EQUAL",
    "LOG",
    "SUM",
    "SQRT",
    "RSQRT",
    "SHAPE",
    "POW",
    "ARG_MIN",
    "FAKE_QUANT",
    "REDUCE_PROD",
    "REDUCE_MAX",
    "PACK",
    "LOGICAL_OR",
    "ONE_HOT",
    "LOGICAL_AND",
    "LOGICAL_NOT",
    "UNPACK",
    "REDUCE_MIN",
    "FLOOR_DIV",
    "REDUCE_ANY",
    "SQUARE",
    "ZEROS_LIKE",
    "FILL",
    "FLOOR_MOD",
    "RANGE",
    "RESIZE_NEAREST_NEIGHBOR",
    "LEAKY_RELU",
    "SQUARED_DIFFERENCE",
    "MIRROR_PAD",
    "ABS",
    "SPLIT_V",
    "UNIQUE",
    "CEIL",
    "REVERSE_V2",
    "ADD_N",
    "GATHER_ND",
    "COS",
    "WHERE",
    "RANK",
    "ELU",
    "REVERSE_SEQUENCE",
    "MATRIX_DIAG",
    "QUANTIZE",
    "MATRIX_SET_DIAG",
    "ROUND",
    "HARD_SWISH",
    "IF",
    "WHILE",
    "NON_MAX_SUPPRESSION_V4",
    "NON_MAX_SUPPRESSION_V5",
    "SCATTER_ND",
    "SELECT_V2",
    "DENSIFY",
    "SEGMENT_SUM",
    "BATCH_MATMUL",
    "PLACEHOLDER_FOR_GREATER_OP_CODES",
    "CUMSUM",
    "CALL_ONCE",
    "BROADCAST_TO",
    "RFFT2D",
    "CONV_3D",
    "IMAG",
    "REAL",
    "COMPLEX_ABS",
    "HASHTABLE",
    "HASHTABLE_FIND",
    "HASHTABLE_IMPORT",
    "HASHTABLE_SIZE",
    "REDUCE_ALL",
    "CONV_3D_TRANSPOSE",
    "VAR_HANDLE",
    "READ_VARIABLE",
    "ASSIGN_VARIABLE",
    "BROADCAST_ARGS",
    "RANDOM_STANDARD_NORMAL",
    "BUCKETIZE",
    "RANDOM_UNIFORM",
    "MULTINOMIAL",
    "GELU",
    "DYNAMIC_UPDATE_SLICE",
    "RELU_0_TO_1",
    "UNSORTED_SEGMENT_PROD",
    "UNSORTED_SEGMENT_MAX",
    "UNSORTED_SEGMENT_SUM",
    "ATAN2",
    "UNSORTED_SEGMENT_MIN",
    "SIGN",
    "BITCAST",
    "BITWISE_XOR",
    "RIGHT_SHIFT",
    "STABLEHLO_LOGISTIC",
    "STABLEHLO_ADD",
    "STABLEHLO_DIVIDE",
    "STABLEHLO_MULTIPLY",
    "STABLEHLO_MAXIMUM",
    "STABLEHLO_RESHAPE",
    "STABLEHLO_CLAMP",
    "STABLEHLO_CONCATENATE",
    "STABLEHLO_BROADCAST_IN_DIM",
    "STABLEHLO_CONVOLUTION",
    "STABLEHLO_SLICE",
    "STABLEHLO_CUSTOM_CALL",
    "STABLEHLO_REDUCE",
    "STABLEHLO_ABS",
    "STABLEHLO_AND",
    "STABLEHLO_COSINE",
    "STABLEHLO_EXPONENTIAL",
    "STABLEHLO_FLOOR",
    "STABLEHLO_LOG",
    "STABLEHLO_MINIMUM",
    "STABLEHLO_NEGATE",
    "STABLEHLO_OR",
    "STABLEHLO_POWER",
    "STABLEHLO_REMAINDER",
    "STABLEHLO_RSQRT",
    "STABLEHLO_SELECT",
    "STABLEHLO_SUBTRACT",
    "STABLEHLO_TANH",
    "STABLEHLO_SCATTER",
    "STABLEHLO_COMPARE",
    "STABLEHLO_CONVERT",
    "STABLEHLO_DYNAMIC_SLICE",
    "STABLEHLO_DYNAMIC_UPDATE_SLICE",
    "STABLEHLO_PAD",
    "STABLEHLO_IOTA",
    "STABLEHLO_DOT_GENERAL",
    "STABLEHLO_REDUCE_WINDOW",
    "STABLEHLO_SORT",
    "STABLEHLO_WHILE",
    "STABLEHLO_GATHER",
    "STABLEHLO_TRANSPOSE",
    "DILATE",
    "STABLEHLO_RNG_BIT_GENERATOR",
    "REDUCE_WINDOW",
    "STABLEHLO_COMPOSITE",
    "STABLEHLO_SHIFT_LEFT",
    "STABLEHLO_CBRT",
    "STABLEHLO_CASE",
];
