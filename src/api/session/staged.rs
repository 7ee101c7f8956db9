//! A session over a model cut into stages before an op whose output shape
//! depends on values ([`crate::frontend::onnx::Stages`]).
//!
//! The first stage is a session of its own, opened with the model. The cut
//! runs on its outputs. The rest is opened at the first run, once the
//! element types of what it reads are known, as a session whose inputs are
//! all free: it compiles a model for each combination of shapes the cut
//! gives (NonZero's count, the boxes NonMaxSuppression keeps), keeps the
//! most recent ones as any session does, and makes its first shape's plan
//! again at every later one. A rest that is itself cut opens stages of its
//! own.

use super::{Session, SessionOptions};
use crate::api::{Error, ModelInput};
use crate::frontend::bounds::ShapeBounds;
use crate::frontend::onnx::{Rest, Stages};
use crate::graph::Tensor;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A model run in stages.
pub(super) struct Staged {
    stages: Stages,
    /// The first stage, when the cut or the outputs read anything it computes.
    first: Option<Session>,
    /// The rest, once opened.
    rest: Mutex<Option<Arc<Session>>>,
    path: PathBuf,
    options: SessionOptions,
}

impl Staged {
    /// Opens the first stage of `stages` (the model at `path`).
    pub(super) fn open(
        path: &Path,
        mut stages: Stages,
        options: &SessionOptions,
    ) -> Result<Staged, Error> {
        let first = (stages.first.take())
            .map(|model| Session::of_decoded(path, model, options.clone()))
            .transpose()?;
        Ok(Staged {
            stages,
            first,
            rest: Mutex::new(None),
            path: path.to_path_buf(),
            options: options.clone(),
        })
    }

    /// The layer the model is cut at.
    pub(super) fn cut(&self) -> &crate::graph::Span {
        &self.stages.cut.span
    }

    /// The error of a staged model asked for what only one compiled model has.
    pub(super) fn no_single_model(&self) -> Error {
        let cut = &self.stages.cut;
        Error::DataDependent {
            spans: vec![cut.span.clone()],
            message: format!(
                "the model runs in stages cut before this layer (the shape of {}'s output depends on values): it has no one compiled model for its input shapes; run it whole with `Session::run`",
                cut.op.op_type()
            ),
        }
    }

    /// Runs the stages on `inputs`, named `names` (the interface's order);
    /// returns the graph's outputs in order.
    pub(super) fn run(&self, names: &[&str], inputs: &[ModelInput]) -> Result<Vec<Tensor>, Error> {
        let mut values: HashMap<String, Tensor> = (names.iter())
            .zip(inputs)
            .map(|(name, x)| (name.to_string(), x.to_tensor()))
            .collect();
        if let Some(first) = &self.first {
            let outputs = first.run(inputs)?;
            let named = first.interface().outputs.iter().map(|v| v.name.clone());
            values.extend(named.zip(outputs));
        }
        let cut = &self.stages.cut;
        let given = (cut.inputs.iter())
            .map(|name| match name.as_str() {
                "" => Ok(None),
                name => self.value(&values, name).map(Some),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = cut.op.evaluate(&given).map_err(|e| Error::DataDependent {
            spans: vec![cut.span.clone()],
            message: e.to_string(),
        })?;
        let named = cut.outputs.iter().cloned().zip(outputs);
        values.extend(named.filter(|(name, _)| !name.is_empty()));
        if let Some(rest) = &self.stages.rest {
            let given = (rest.inputs.iter())
                .map(|name| self.value(&values, name))
                .collect::<Result<Vec<_>, _>>()?;
            let session = self.rest_session(rest, &given)?;
            let given: Vec<ModelInput> = given.into_iter().map(ModelInput::Tensor).collect();
            let outputs = session.run(&given)?;
            let named = session.interface().outputs.iter().map(|v| v.name.clone());
            values.extend(named.zip(outputs).collect::<Vec<_>>());
        }
        (self.stages.outputs.iter())
            .map(|name| self.value(&values, name).cloned())
            .collect()
    }

    /// The steps of the stages compiled so far that run on the reference
    /// executor (`Session::fallback_steps`).
    pub(super) fn fallback_steps(&self) -> Vec<(String, String, Vec<crate::graph::Span>)> {
        let rest = self.rest.lock().unwrap_or_else(|e| e.into_inner()).clone();
        (self.first.iter().flat_map(Session::fallback_steps))
            .chain(rest.iter().flat_map(|r| r.fallback_steps()))
            .collect()
    }

    /// The value named `name`: computed by a stage, given, or a weight.
    fn value<'a>(
        &'a self,
        values: &'a HashMap<String, Tensor>,
        name: &str,
    ) -> Result<&'a Tensor, Error> {
        (values.get(name).or_else(|| self.stages.weight(name))).ok_or_else(|| {
            Error::DataDependent {
                spans: vec![self.stages.cut.span.clone()],
                message: format!("value '{name}' is computed by no stage before it is read"),
            }
        })
    }

    /// The rest's session, opened at the first run with the element types
    /// and ranks of what it reads.
    fn rest_session(&self, rest: &Rest, given: &[&Tensor]) -> Result<Arc<Session>, Error> {
        let mut opened = self.rest.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(session) = opened.as_ref() {
            return Ok(session.clone());
        }
        let types: Vec<_> = given.iter().map(|t| (t.dtype(), t.rank())).collect();
        // The bounds name the model's own inputs, which the rest need not take.
        let options = SessionOptions {
            bounds: ShapeBounds::default(),
            ..self.options.clone()
        };
        let session = Arc::new(Session::of_decoded(
            &self.path,
            rest.decoded(&types),
            options,
        )?);
        *opened = Some(session.clone());
        Ok(session)
    }
}
