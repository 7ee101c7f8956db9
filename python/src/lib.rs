//! `layoutopt._native`: the Rust half of the `layoutopt` Python package. It
//! holds the library's objects (an imported model, a plan, a compiled model)
//! and hands plans to Python as the JSON document of `layoutopt plan --json`,
//! which `layoutopt/__init__.py` turns into a Python object.
//!
//! Arrays cross without copies where they can: a C-contiguous float32 input
//! is read in place by the runtime, and a float32 output becomes a NumPy array
//! over the buffer the runtime wrote (kept alive by the array).

use layoutopt::api::{
    self, json, CompiledModel, DType, DeclaredValue, Dim, DimRange, Graph, ImportOptions, Layout,
    Machine, ModelInput, Plan as LayoutPlan, PlanLayouts, PlannerKind, RuntimeOptions,
    SessionOptions, TargetFamily, Tensor, TensorData, ValueType,
};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use pyo3::IntoPyObjectExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Large buffers (decoded weights, packed kernels) on huge pages, as in the
/// command line.
#[global_allocator]
static ALLOCATOR: layoutopt::api::HugePageAdvice = layoutopt::api::HugePageAdvice;

pyo3::create_exception!(
    _native,
    Error,
    PyException,
    "An error of a layoutopt stage (import, planning, compilation, a run, a write)."
);

fn stage_error(e: impl std::fmt::Display) -> PyErr {
    Error::new_err(e.to_string())
}

/// An imported model and the file it came from.
struct Source {
    path: PathBuf,
    graph: Graph,
}

/// An imported model.
#[pyclass(module = "layoutopt._native", frozen)]
struct Model {
    source: Arc<Source>,
}

/// Imports an ONNX or TFLite model; `input_shapes` binds symbolic dimensions.
#[pyfunction]
#[pyo3(signature = (path, input_shapes = None))]
fn load(
    py: Python<'_>,
    path: PathBuf,
    input_shapes: Option<HashMap<String, Vec<usize>>>,
) -> PyResult<Model> {
    let opts = ImportOptions {
        input_shapes: input_shapes.unwrap_or_default(),
        ..ImportOptions::default()
    };
    let graph = py
        .allow_threads(|| api::load_model_with(&path, &opts))
        .map_err(stage_error)?;
    Ok(Model {
        source: Arc::new(Source { path, graph }),
    })
}

fn tensor_dict<'py>(py: Python<'py>, name: &str, ty: &ValueType) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", name)?;
    d.set_item("dtype", ty.dtype.to_string())?;
    d.set_item("shape", ty.shape.clone())?;
    Ok(d)
}

#[pymethods]
impl Model {
    /// The graph inputs: a list of {"name", "dtype", "shape"}.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let g = &self.source.graph;
        g.inputs()
            .iter()
            .map(|&id| {
                let v = &g.node(id).outputs[0];
                tensor_dict(py, &v.name, &v.ty)
            })
            .collect()
    }

    /// The graph outputs: a list of {"name", "dtype", "shape"}.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let g = &self.source.graph;
        g.outputs()
            .iter()
            .map(|&v| tensor_dict(py, &g.value(v).name, &g.value(v).ty))
            .collect()
    }

    /// Plans the layout of every tensor; `pinned` maps graph inputs and
    /// outputs to the layout they arrive or leave in (e.g. {"input": "NHWC"}).
    #[pyo3(signature = (planner = "global", target = "nchwc", pinned = None))]
    fn plan(
        &self,
        py: Python<'_>,
        planner: &str,
        target: &str,
        pinned: Option<HashMap<String, String>>,
    ) -> PyResult<Plan> {
        let planner: PlannerKind = planner
            .parse()
            .map_err(|e| PyValueError::new_err(format!("planner: {e}")))?;
        let target: TargetFamily = target
            .parse()
            .map_err(|e| PyValueError::new_err(format!("target: {e}")))?;
        let mut planning = PlanLayouts::new(planner, target);
        for (name, layout) in pinned.unwrap_or_default() {
            let layout = Layout::parse(&layout)
                .map_err(|e| PyValueError::new_err(format!("pinned '{name}': {e}")))?;
            planning = planning.with_pinned(&name, layout);
        }
        let plan = py
            .allow_threads(|| planning.plan(&self.source.graph))
            .map_err(stage_error)?;
        Ok(Plan {
            source: self.source.clone(),
            plan,
        })
    }
}

/// An error for more threads than the runtime allows.
fn check_threads(threads: usize) -> PyResult<()> {
    let max = api::max_threads();
    match threads > max {
        true => Err(PyValueError::new_err(format!(
            "threads: {threads} is more than {max} (4 per core); give 0 for one per core"
        ))),
        false => Ok(()),
    }
}

/// A plan of a model.
#[pyclass(module = "layoutopt._native", frozen)]
struct Plan {
    source: Arc<Source>,
    plan: LayoutPlan,
}

#[pymethods]
impl Plan {
    /// The plan as the JSON document of `layoutopt plan --json`.
    fn to_json(&self) -> String {
        json::plan_document(&self.source.path, &self.plan.report, None)
    }

    /// The layout the model tensor `name` is stored in, or None when planning
    /// folded it away.
    fn layout_of(&self, name: &str) -> Option<String> {
        self.plan.layout_of(name).map(|l| l.to_string())
    }

    /// Compiles the planned model for this CPU (threads: 0 = one per core).
    #[pyo3(signature = (threads = 0))]
    fn compile(&self, py: Python<'_>, threads: usize) -> PyResult<Compiled> {
        check_threads(threads)?;
        let model = py
            .allow_threads(|| {
                api::compile(
                    Machine::shared(),
                    &self.plan.graph,
                    &RuntimeOptions::with_threads(threads),
                )
            })
            .map_err(stage_error)?;
        // The planned graph's inputs: a pinned one has its layout's physical shape.
        let (g, source) = (&self.plan.graph, &self.source.graph);
        Ok(Compiled {
            model,
            inputs: g
                .inputs()
                .iter()
                .map(|&id| {
                    let v = &g.node(id).outputs[0];
                    (v.name.clone(), v.ty.clone())
                })
                .collect(),
            // The model's output names (the planned graph ends in transforms).
            outputs: (source.outputs().iter())
                .map(|&v| source.value(v).name.clone())
                .collect(),
        })
    }

    /// Writes the planned graph as an ONNX model at `path`; returns what was
    /// written as the JSON document of `layoutopt export --json`.
    #[pyo3(signature = (path, force = false))]
    fn export(&self, py: Python<'_>, path: PathBuf, force: bool) -> PyResult<String> {
        let src = &self.source;
        let written = py
            .allow_threads(|| api::export_plan(&src.path, &src.graph, &self.plan, &path, force))
            .map_err(stage_error)?;
        Ok(json::document(
            "export",
            &src.path,
            &json::Export::of(api::ExportFor::Verification, &self.plan.report, &written),
        ))
    }

    /// Writes the HTML explorer of this plan beside the `against` planner's
    /// plan of the same model at `path`.
    #[pyo3(signature = (path, against = "local", force = false))]
    fn explore(&self, py: Python<'_>, path: PathBuf, against: &str, force: bool) -> PyResult<()> {
        let against: PlannerKind = against
            .parse()
            .map_err(|e| PyValueError::new_err(format!("against: {e}")))?;
        let src = &self.source;
        let family: TargetFamily = self
            .plan
            .report
            .family
            .to_ascii_lowercase()
            .parse()
            .map_err(stage_error)?;
        py.allow_threads(|| {
            let other = PlanLayouts::new(against, family).plan(&src.graph)?;
            api::explore_plans(
                Machine::shared(),
                &src.path,
                &src.graph,
                &[&self.plan, &other],
                &path,
                force,
                &RuntimeOptions::with_threads(0),
            )
        })
        .map_err(stage_error)
    }
}

/// A planned model compiled for this CPU.
#[pyclass(module = "layoutopt._native", frozen)]
struct Compiled {
    model: CompiledModel,
    /// The model's inputs (name and type), in graph order.
    inputs: Vec<(String, ValueType)>,
    /// The model's output names, in graph order.
    outputs: Vec<String>,
}

/// One input as the runtime reads it: borrowed float32 elements, or a tensor
/// converted from another dtype or a non-contiguous array.
enum Held<'py> {
    Borrowed(numpy::PyReadonlyArrayDyn<'py, f32>),
    Owned(Tensor),
}

/// `array` as a NumPy array, or a clear error naming the input.
fn ndarray<'a, 'py>(
    array: &'a Bound<'py, PyAny>,
    name: &str,
) -> PyResult<&'a Bound<'py, PyUntypedArray>> {
    array.downcast::<PyUntypedArray>().map_err(|_| {
        PyValueError::new_err(format!(
            "input '{name}': expected a numpy.ndarray, got {}",
            array
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })
}

/// Reads `array` as the input `name` of type `ty`: a clear error for another
/// dtype or shape.
fn held_input<'py>(array: &Bound<'py, PyAny>, name: &str, ty: &ValueType) -> PyResult<Held<'py>> {
    let array = ndarray(array, name)?;
    let dtype = array.dtype().str()?.to_string();
    if array.shape() != ty.shape.as_slice() {
        return Err(PyValueError::new_err(format!(
            "input '{name}': the array's shape is {:?}, the model's input is {ty}",
            array.shape()
        )));
    }
    let wrong = || {
        PyValueError::new_err(format!(
            "input '{name}': the array's dtype is {dtype}, the model's input is {ty}"
        ))
    };
    macro_rules! owned {
        ($t:ty, $variant:ident) => {{
            let a = array.downcast::<PyArrayDyn<$t>>().map_err(|_| wrong())?;
            let v: Vec<$t> = a.readonly().as_array().iter().cloned().collect();
            Held::Owned(Tensor::new(ty.shape.clone(), TensorData::$variant(v)))
        }};
    }
    Ok(match ty.dtype {
        DType::F32 => {
            let a = array.downcast::<PyArrayDyn<f32>>().map_err(|_| wrong())?;
            let r = a.readonly();
            // Only C order is the runtime's row-major order (numpy's
            // `as_slice` also takes Fortran-ordered arrays).
            match a.is_c_contiguous() {
                true => Held::Borrowed(r),
                false => Held::Owned(Tensor::from_f32(
                    ty.shape.clone(),
                    r.as_array().iter().cloned().collect(),
                )),
            }
        }
        DType::F16 => owned!(half::f16, F16),
        DType::F64 => owned!(f64, F64),
        DType::I64 => owned!(i64, I64),
        DType::I32 => owned!(i32, I32),
        DType::I8 => owned!(i8, I8),
        DType::U8 => owned!(u8, U8),
        DType::Bool => owned!(bool, Bool),
        other => {
            return Err(PyValueError::new_err(format!(
                "input '{name}': {other} inputs cannot be given from Python"
            )))
        }
    })
}

/// Keeps a runtime output buffer alive under the NumPy array that views it.
#[pyclass(module = "layoutopt._native", frozen)]
struct OutputBuffer {
    _data: Arc<TensorData>,
}

/// An output as a NumPy array: a view of a float32 buffer, a copy otherwise.
fn output_array<'py>(py: Python<'py>, t: Tensor) -> PyResult<Bound<'py, PyAny>> {
    macro_rules! copied {
        ($v:expr) => {
            numpy::PyArray1::from_slice(py, $v)
                .reshape(t.shape.clone())?
                .into_any()
        };
    }
    Ok(match &*t.data {
        TensorData::F32(v) => {
            let view = ArrayViewD::from_shape(IxDyn(&t.shape), v).map_err(stage_error)?;
            let owner = Bound::new(
                py,
                OutputBuffer {
                    _data: t.data.clone(),
                },
            )?;
            // SAFETY: the array points into the Vec inside `t.data`, which
            // `owner` keeps alive; the runtime never writes a buffer someone
            // else holds (it takes a new one), so the elements stay put.
            unsafe { PyArrayDyn::borrow_from_array(&view, owner.into_any()) }.into_any()
        }
        TensorData::F16(v) => copied!(v),
        TensorData::F64(v) => copied!(v),
        TensorData::I64(v) => copied!(v),
        TensorData::I32(v) => copied!(v),
        TensorData::I8(v) => copied!(v),
        TensorData::U8(v) => copied!(v),
        TensorData::Bool(v) => copied!(v),
        _ => {
            return Err(Error::new_err(format!(
                "an output of type {} cannot be handed to Python",
                t.dtype()
            )))
        }
    })
}

#[pymethods]
impl Compiled {
    /// Worker threads the model runs on.
    #[getter]
    fn threads(&self) -> usize {
        self.model.threads()
    }

    /// Runs the model on {input name: array}; returns {output name: array}.
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let names: Vec<&str> = self.inputs.iter().map(|(n, _)| n.as_str()).collect();
        let arrays = input_arrays(inputs, &names)?;
        let types: Vec<&ValueType> = self.inputs.iter().map(|(_, ty)| ty).collect();
        let run = |views: &[ModelInput]| self.model.run_inputs(views);
        run_arrays(py, run, &arrays, &names, &types, &self.outputs)
    }
}

/// The arrays of `inputs` ({name: array}) in the order of `names`: an error
/// for a missing input or a name the model lacks.
fn input_arrays<'py>(
    inputs: &Bound<'py, PyDict>,
    names: &[&str],
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    for key in inputs.keys() {
        let key: String = key.extract().map_err(|_| {
            PyValueError::new_err("inputs: keys must be the model's input names (str)")
        })?;
        if !names.contains(&key.as_str()) {
            return Err(PyValueError::new_err(format!(
                "inputs: the model has no input '{key}' (its inputs: {names:?})"
            )));
        }
    }
    names
        .iter()
        .map(|name| {
            inputs.get_item(name)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "inputs: input '{name}' is not given (its inputs: {names:?})"
                ))
            })
        })
        .collect()
}

/// Runs `model` on `arrays` (one per input, of the input's type); returns
/// {output name: array}.
fn run_arrays<'py, E: std::fmt::Display + Send>(
    py: Python<'py>,
    run: impl FnOnce(&[ModelInput]) -> Result<Vec<Tensor>, E> + Send,
    arrays: &[Bound<'py, PyAny>],
    names: &[&str],
    types: &[&ValueType],
    outputs: &[String],
) -> PyResult<Bound<'py, PyDict>> {
    let held = (arrays.iter().zip(names).zip(types))
        .map(|((a, name), ty)| held_input(a, name, ty))
        .collect::<PyResult<Vec<_>>>()?;
    let views: Vec<ModelInput> = held
        .iter()
        .zip(types)
        .map(|(h, ty)| match h {
            Held::Borrowed(a) => ModelInput::F32 {
                shape: &ty.shape,
                data: a.as_slice().unwrap_or_default(),
            },
            Held::Owned(t) => ModelInput::Tensor(t),
        })
        .collect();
    let results = py.allow_threads(|| run(&views)).map_err(stage_error)?;
    let out = PyDict::new(py);
    for (name, t) in outputs.iter().zip(results) {
        out.set_item(name, output_array(py, t)?)?;
    }
    Ok(out)
}

/// A model opened for running at any input shape it declares: planned at the
/// first combination of shapes, each new one compiled once with that plan's
/// layouts, then kept.
#[pyclass(module = "layoutopt._native", frozen)]
struct Session {
    session: api::Session,
    /// The output names, in the model's order.
    outputs: Vec<String>,
}

/// A declared value as {"name", "dtype", "shape"}: dtype None where the file
/// declares none, a symbolic dimension by its name, a free one as None.
fn declared_dict<'py>(py: Python<'py>, v: &DeclaredValue) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("name", &v.name)?;
    d.set_item("dtype", v.dtype.map(|t| t.to_string()))?;
    let shape: Option<Vec<PyObject>> = v
        .dims
        .as_ref()
        .map(|dims| {
            dims.iter()
                .map(|dim| match dim {
                    Dim::Static(n) => n.into_py_any(py),
                    Dim::Symbolic(p) => p.into_py_any(py),
                    Dim::Unknown => Ok(py.None()),
                })
                .collect::<PyResult<_>>()
        })
        .transpose()?;
    d.set_item("shape", shape)?;
    Ok(d)
}

/// Sets this process's memory limit ("8G", "512MiB" or bytes): what import,
/// planning and compilation may allocate.
#[pyfunction]
fn set_memory_limit(limit: &str) -> PyResult<()> {
    let bytes = api::parse_bytes(limit).ok_or_else(|| {
        PyValueError::new_err(format!(
            "memory_limit: '{limit}' is not a size (bytes, or with a unit: 512M, 8G, 8GiB)"
        ))
    })?;
    api::set_memory_limit(bytes);
    Ok(())
}

/// Opens a model for running at any shape. `isa` narrows the kernels'
/// instruction set; `max_shapes` bounds the compiled shapes kept;
/// `input_shapes` bounds the shapes of inputs, by name, each dimension `n`
/// or `lo..hi` separated by commas (as `--input-shape`).
#[pyfunction]
#[pyo3(signature = (path, threads = 0, planner = "global", target = "nchwc", isa = None, max_shapes = 8, input_shapes = None))]
#[allow(clippy::too_many_arguments)]
fn open_session(
    py: Python<'_>,
    path: PathBuf,
    threads: usize,
    planner: &str,
    target: &str,
    isa: Option<&str>,
    max_shapes: usize,
    input_shapes: Option<HashMap<String, String>>,
) -> PyResult<Session> {
    check_threads(threads)?;
    let mut options = SessionOptions::with_threads(threads);
    options.planner = planner
        .parse()
        .map_err(|e| PyValueError::new_err(format!("planner: {e}")))?;
    options.target = target
        .parse()
        .map_err(|e| PyValueError::new_err(format!("target: {e}")))?;
    options.runtime.isa = isa
        .map(|i| i.parse())
        .transpose()
        .map_err(|e| PyValueError::new_err(format!("isa: {e}")))?;
    if max_shapes == 0 {
        return Err(PyValueError::new_err(
            "max_shapes: keep at least 1 compiled shape",
        ));
    }
    options.max_shapes = max_shapes;
    for (name, dims) in input_shapes.unwrap_or_default() {
        let ranges = (dims.split(','))
            .map(|d| d.trim().parse::<DimRange>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PyValueError::new_err(format!("input_shapes: input '{name}': {e}")))?;
        options.bounds.0.insert(name, ranges);
    }
    let session = py
        .allow_threads(|| api::Session::open(&path, options))
        .map_err(stage_error)?;
    let outputs = (session.interface().outputs.iter())
        .map(|v| v.name.clone())
        .collect();
    Ok(Session { session, outputs })
}

#[pymethods]
impl Session {
    /// The inputs as the model declares them.
    #[getter]
    fn inputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        (self.session.interface().inputs.iter())
            .map(|v| declared_dict(py, v))
            .collect()
    }

    /// The outputs as the model declares them.
    #[getter]
    fn outputs<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        (self.session.interface().outputs.iter())
            .map(|v| declared_dict(py, v))
            .collect()
    }

    /// The input shapes compiled and kept, the most recently used last.
    #[getter]
    fn compiled_shapes(&self) -> Vec<Vec<Vec<usize>>> {
        self.session.compiled_shapes()
    }

    /// Runs the model on {input name: array}; returns {output name: array}
    /// and the seconds spent compiling for these shapes (0 when they were
    /// compiled before).
    fn run<'py>(
        &self,
        py: Python<'py>,
        inputs: &Bound<'py, PyDict>,
    ) -> PyResult<(Bound<'py, PyDict>, f64)> {
        let declared = &self.session.interface().inputs;
        let names: Vec<&str> = declared.iter().map(|v| v.name.as_str()).collect();
        let arrays = input_arrays(inputs, &names)?;
        let shapes = (arrays.iter().zip(&names))
            .map(|(a, name)| Ok(ndarray(a, name)?.shape().to_vec()))
            .collect::<PyResult<Vec<Vec<usize>>>>()?;
        // A model cut before an op whose output shape depends on values runs
        // stage by stage; what its run spent compiling is not known (NaN).
        if self.session.cut().is_some() {
            let types = (declared.iter().zip(shapes))
                .map(|(v, shape)| match v.dtype {
                    Some(dtype) => Ok(ValueType::new(dtype, shape)),
                    None => Err(Error::new_err(format!(
                        "input '{}' declares no type",
                        v.name
                    ))),
                })
                .collect::<PyResult<Vec<ValueType>>>()?;
            let types: Vec<&ValueType> = types.iter().collect();
            let run = |views: &[ModelInput]| self.session.run(views);
            let out = run_arrays(py, run, &arrays, &names, &types, &self.outputs)?;
            return Ok((out, f64::NAN));
        }
        let (model, fresh) = py
            .allow_threads(|| {
                let shapes: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
                self.session.model_for(&shapes)
            })
            .map_err(|e| match e {
                api::Error::Input(mismatch) => PyValueError::new_err(mismatch.to_string()),
                e => stage_error(e),
            })?;
        let types: Vec<&ValueType> = model.inputs.iter().collect();
        let run = |views: &[ModelInput]| model.model.run_inputs(views);
        let out = run_arrays(py, run, &arrays, &names, &types, &self.outputs)?;
        let seconds = match fresh {
            true => model.compile_time.as_secs_f64(),
            false => 0.0,
        };
        Ok((out, seconds))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_class::<Model>()?;
    m.add_class::<Plan>()?;
    m.add_class::<Compiled>()?;
    m.add_function(wrap_pyfunction!(open_session, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_limit, m)?)?;
    m.add_class::<Session>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("SCHEMA_VERSION", json::SCHEMA_VERSION)?;
    Ok(())
}
