//! Model importers: each turns a file into a `Graph` with per-layer spans.
pub mod bounds;
mod compose;
pub mod npy;
pub mod onnx;
pub mod tflite;

use std::io::Read;
use std::path::Path;

/// Opens a model, tensor or external-data file for reading. Only a regular file
/// is opened: a FIFO would block forever and a device (`/dev/zero`) never ends,
/// so those, and directories, are refused before they are opened. A file larger
/// than the memory budget (`LAYOUTOPT_MEMORY_LIMIT`) is refused before reading.
pub fn open_file(path: &Path) -> std::io::Result<std::fs::File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, FIFO or device is never read)",
        ));
    }
    check_size(meta.len())?;
    std::fs::File::open(path)
}

/// A model file's bytes, mapped from the page cache where the system allows.
/// Read into a buffer of its own, a model's weights would be copied twice
/// before they reach their tensors, and writing fresh pages is what costs: on a
/// virtual machine about 0.6 ms per MB, several times the copy itself (import
/// of a 100 MB ResNet50 was mostly that).
pub enum FileBytes {
    /// The file, mapped read-only.
    Mapped(memmap2::Mmap),
    /// The file, read (an empty file, or one the system would not map).
    Read(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            FileBytes::Mapped(map) => map,
            FileBytes::Read(bytes) => bytes,
        }
    }
}

/// Maps a model file, refusing what [`open_file`] refuses.
pub fn map_file(path: &Path) -> std::io::Result<FileBytes> {
    let file = open_file(path)?;
    if file.metadata()?.len() == 0 {
        return Ok(FileBytes::Read(Vec::new()));
    }
    // SAFETY: the map is read-only and the importers copy out everything they
    // keep before it is dropped. As with every mapped model file (onnxruntime's
    // external data, safetensors), a file truncated by another process while it
    // is being imported is outside what this guards against.
    match unsafe { memmap2::MmapOptions::new().populate().map(&file) } {
        Ok(map) => Ok(FileBytes::Mapped(map)),
        Err(_) => {
            let mut bytes = Vec::new();
            (&file).read_to_end(&mut bytes)?;
            Ok(FileBytes::Read(bytes))
        }
    }
}

/// Reads a file whole, refusing what [`open_file`] refuses.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_file(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// An error when `bytes` would pass the memory budget.
pub(crate) fn check_size(bytes: u64) -> std::io::Result<()> {
    let limit = crate::graph::memory_limit();
    if bytes > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is more than the memory budget of {} (set LAYOUTOPT_MEMORY_LIMIT)",
                crate::graph::format_bytes(bytes),
                crate::graph::format_bytes(limit)
            ),
        ));
    }
    Ok(())
}

/// One dimension of a shape a model file declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A fixed extent.
    Static(usize),
    /// A named symbolic dimension (ONNX `dim_param`): every input that
    /// names it takes the same extent.
    Symbolic(String),
    /// A free dimension with no name (ONNX: neither a value nor a name, or -1).
    Unknown,
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Symbolic(p) => f.write_str(p),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A graph input or output as the model file declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredValue {
    /// Its name.
    pub name: String,
    /// Its element type; `None` where the file declares none (an output
    /// whose type only import computes).
    pub dtype: Option<crate::graph::DType>,
    /// Its dimensions; `None` where the file declares no shape.
    pub dims: Option<Vec<Dim>>,
}

/// The inputs a model takes and the outputs it gives, as its file declares
/// them (free dimensions unbound): what a session shows before any shape is
/// compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct Interface {
    /// The graph inputs, in the model's order (initializers and frozen
    /// inputs excluded).
    pub inputs: Vec<DeclaredValue>,
    /// The graph outputs, in the model's order.
    pub outputs: Vec<DeclaredValue>,
}

impl Interface {
    /// The interface of an imported graph, every dimension static.
    pub fn of_graph(g: &crate::graph::Graph) -> Interface {
        let value = |name: &str, ty: &crate::graph::ValueType| DeclaredValue {
            name: name.to_string(),
            dtype: Some(ty.dtype),
            dims: Some(ty.shape.iter().map(|&n| Dim::Static(n)).collect()),
        };
        Interface {
            inputs: (g.inputs().iter())
                .map(|&id| {
                    let v = &g.node(id).outputs[0];
                    value(&v.name, &v.ty)
                })
                .collect(),
            outputs: (g.outputs().iter())
                .map(|&v| value(&g.value(v).name, &g.value(v).ty))
                .collect(),
        }
    }

    /// Whether every input's shape is declared and static: the model then
    /// takes one shape only.
    pub fn is_static(&self) -> bool {
        self.inputs.iter().all(|v| {
            (v.dims.as_ref()).is_some_and(|d| d.iter().all(|d| matches!(d, Dim::Static(_))))
        })
    }

    /// Checks the shapes of the inputs to be run (in the order of `inputs`)
    /// against what the model declares: the rank, every static extent, and
    /// one extent per symbolic name across all inputs.
    pub fn check_shapes(&self, shapes: &[&[usize]]) -> Result<(), ShapeMismatch> {
        if shapes.len() != self.inputs.len() {
            return Err(ShapeMismatch::Count {
                given: shapes.len(),
                takes: self.inputs.len(),
            });
        }
        let mut bound: std::collections::HashMap<&str, (usize, &str)> = Default::default();
        for (v, shape) in self.inputs.iter().zip(shapes) {
            let Some(dims) = &v.dims else { continue };
            let input = || v.name.clone();
            if dims.len() != shape.len() {
                return Err(ShapeMismatch::Rank {
                    input: input(),
                    shape: shape.to_vec(),
                    declared: join_dims(dims),
                    declared_rank: dims.len(),
                });
            }
            for (axis, (d, &given)) in dims.iter().zip(shape.iter()).enumerate() {
                match d {
                    Dim::Static(s) if *s != given => {
                        return Err(ShapeMismatch::Static {
                            input: input(),
                            axis,
                            given,
                            declared: *s,
                            dims: join_dims(dims),
                        })
                    }
                    Dim::Symbolic(p) => match bound.get(p.as_str()) {
                        Some(&(extent, first)) if extent != given => {
                            return Err(ShapeMismatch::Symbol {
                                input: input(),
                                axis,
                                symbol: p.clone(),
                                given,
                                first: first.to_string(),
                                extent,
                            })
                        }
                        Some(_) => {}
                        None => {
                            bound.insert(p, (given, &v.name));
                        }
                    },
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Input shapes that do not fit what a model declares.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[allow(missing_docs)]
pub enum ShapeMismatch {
    #[error("{given} inputs given, the model takes {takes}")]
    Count { given: usize, takes: usize },
    #[error("input '{input}': the array has rank {} (shape {shape:?}), the model declares rank {declared_rank} [{declared}]", shape.len())]
    Rank {
        input: String,
        shape: Vec<usize>,
        declared: String,
        declared_rank: usize,
    },
    #[error(
        "input '{input}': dimension {axis} is {given}, the model declares {declared} [{dims}]"
    )]
    Static {
        input: String,
        axis: usize,
        given: usize,
        declared: usize,
        dims: String,
    },
    #[error("input '{input}': dimension {axis} ('{symbol}') is {given}, but input '{first}' gave '{symbol}' the extent {extent}")]
    Symbol {
        input: String,
        axis: usize,
        symbol: String,
        given: usize,
        first: String,
        extent: usize,
    },
    #[error(
        "input '{input}': dimension {axis} is {given}, outside the bounds {range} given for it"
    )]
    OutOfBounds {
        input: String,
        axis: usize,
        given: usize,
        range: String,
    },
    #[error(
        "bounds are given for '{input}', which is no input of the model (its inputs: {inputs:?})"
    )]
    NoInput { input: String, inputs: Vec<String> },
    #[error(
        "input '{input}': bounds are given for {given} dimensions, its shape has rank {declared}"
    )]
    BoundsRank {
        input: String,
        given: usize,
        declared: usize,
    },
    #[error("input '{input}': dimension {axis} is bounded by {range}, but the model declares it static, {declared}")]
    StaticBounded {
        input: String,
        axis: usize,
        range: String,
        declared: usize,
    },
}

/// Dimensions as a model declares them, e.g. "batch, 3, 224, 224".
fn join_dims(dims: &[Dim]) -> String {
    dims.iter()
        .map(Dim::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
