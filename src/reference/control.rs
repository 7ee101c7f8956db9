//! If, Loop and Scan (ONNX control flow), evaluated by running their subgraphs
//! on this executor. The ops hold graphs, so they are defined here, the lowest
//! layer that can run a graph; the importer builds them and every stage reaches
//! them through [`OpDef`] as `Op::Control`.
//!
//! Shapes are static, so an If's branches agree on their output types, a
//! loop-carried value keeps its type across iterations, and a scan output's
//! length is known at import; the importer checks all of it. What only a run
//! can tell is checked here: a loop that does not end stops at
//! [`max_loop_iterations`], and a loop whose scan outputs would not have their
//! imported length is an error.

use super::run;
use crate::graph::{
    Concat, ControlFlow, ControlFlowOp, Gather, Graph, OpDef, OpError, RunSubgraph, Tensor,
    TensorData, ValueType,
};
use std::any::Any;
use std::sync::OnceLock;

/// The environment variable that sets how many iterations a Loop may run.
pub const MAX_LOOP_ITERATIONS_ENV: &str = "LAYOUTOPT_MAX_LOOP_ITERATIONS";

/// The default limit on a Loop's iterations: a loop whose condition never
/// turns false and that has no trip count stops here with an error rather
/// than running forever.
pub const DEFAULT_MAX_LOOP_ITERATIONS: u64 = 100_000;

/// How many iterations one run of a Loop may take: `LAYOUTOPT_MAX_LOOP_ITERATIONS`,
/// else [`DEFAULT_MAX_LOOP_ITERATIONS`]; read once.
pub fn max_loop_iterations() -> u64 {
    static LIMIT: OnceLock<u64> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::env::var(MAX_LOOP_ITERATIONS_ENV)
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(DEFAULT_MAX_LOOP_ITERATIONS)
    })
}

/// ONNX If: runs one of two branches, which read no inputs of their own but
/// the values they capture from the enclosing graph.
#[derive(Debug)]
pub struct If {
    /// Run when the condition is true.
    pub then_branch: Graph,
    /// Run when it is false.
    pub else_branch: Graph,
    /// The node's inputs: the condition, then the captured values (each
    /// branch's graph inputs, in this order).
    pub inputs: Vec<ValueType>,
    /// The outputs both branches compute.
    pub outputs: Vec<ValueType>,
}

/// ONNX Loop: the body runs while the condition holds and the trip count is
/// not reached, carrying values from one iteration to the next and stacking
/// its scan outputs along a new axis 0.
#[derive(Debug)]
pub struct Loop {
    /// Inputs: iteration number (i64 scalar), condition (bool scalar), the
    /// carried values, the captured values. Outputs: the condition, the
    /// carried values, the scan outputs' elements.
    pub body: Graph,
    /// Whether input 0 is the maximum trip count.
    pub has_trip_count: bool,
    /// Whether the next input is the initial condition.
    pub has_condition: bool,
    /// How many loop-carried values there are.
    pub carried: usize,
    /// The node's inputs: trip count and condition where given, the carried
    /// values' initial values, the captured values.
    pub inputs: Vec<ValueType>,
    /// The carried values' final values, then the scan outputs.
    pub outputs: Vec<ValueType>,
}

/// The axis a Scan input is cut along or a Scan output stacked along, and
/// whether it is walked from the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanAxis {
    /// The axis.
    pub axis: usize,
    /// Walked last element first.
    pub reverse: bool,
}

/// ONNX Scan (opset 9 on): the body runs once per element along each scan
/// input's axis, carrying state, and its scan outputs are stacked.
#[derive(Debug)]
pub struct Scan {
    /// Inputs: the states, one slice of each scan input, the captured values.
    /// Outputs: the states, the scan outputs' elements.
    pub body: Graph,
    /// How many state values there are.
    pub states: usize,
    /// Each scan input's axis and direction.
    pub scan_inputs: Vec<ScanAxis>,
    /// Each scan output's axis and direction.
    pub scan_outputs: Vec<ScanAxis>,
    /// The iterations: every scan input's extent along its axis.
    pub length: usize,
    /// The node's inputs: initial states, scan inputs, captured values.
    pub inputs: Vec<ValueType>,
    /// The final states, then the scan outputs.
    pub outputs: Vec<ValueType>,
}

/// Checks the inputs against the types the op was imported for.
fn check_inputs(op: &str, want: &[ValueType], got: &[&ValueType]) -> Result<(), OpError> {
    if want.len() != got.len() {
        return Err(OpError::Arity(format!(
            "{op} takes {} inputs, got {}",
            want.len(),
            got.len()
        )));
    }
    match want.iter().zip(got).position(|(w, g)| w != *g) {
        Some(i) => Err(OpError::Shape(format!(
            "{op} input {i} is {}, the op was imported for {}",
            got[i], want[i]
        ))),
        None => Ok(()),
    }
}

/// Runs subgraph `i`, naming where in the op it failed.
fn run_body(
    run: &mut RunSubgraph,
    i: usize,
    inputs: &[Tensor],
    what: &str,
) -> Result<Vec<Tensor>, OpError> {
    run(i, inputs).map_err(|e| OpError::Value(format!("{what}: {e}")))
}

/// The subgraphs of a control-flow op, in the order its `run` numbers them.
pub fn subgraphs(op: &ControlFlow) -> Vec<&Graph> {
    let any = op.0.as_any();
    (any.downcast_ref::<If>().map(If::graphs))
        .or_else(|| any.downcast_ref::<Loop>().map(|l| vec![&l.body]))
        .or_else(|| any.downcast_ref::<Scan>().map(|s| vec![&s.body]))
        .unwrap_or_default()
}

impl If {
    /// The branches, as `run` numbers them.
    fn graphs(&self) -> Vec<&Graph> {
        vec![&self.then_branch, &self.else_branch]
    }
}

/// The reference semantics of a control-flow op: `graphs`, its subgraphs,
/// run on this executor.
fn eval_here(
    op: &dyn ControlFlowOp,
    graphs: &[&Graph],
    x: &[&Tensor],
    outputs: &[ValueType],
) -> Result<Vec<Tensor>, OpError> {
    op.run(x, outputs, &mut |i, ins| {
        run(graphs[i], ins).map_err(|e| OpError::Value(e.to_string()))
    })
}

/// The single boolean of a condition.
fn condition(t: &Tensor, what: &str) -> Result<bool, OpError> {
    match &*t.data {
        TensorData::Bool(v) if v.len() == 1 => Ok(v[0]),
        _ => Err(OpError::Value(format!(
            "{what} must be one boolean, got {}",
            ValueType::new(t.dtype(), t.shape.clone())
        ))),
    }
}

/// `parts` (one per iteration) stacked along a new axis `at` of type `ty`
/// (the parts in order; none gives the empty tensor).
fn stack(parts: &[Tensor], at: ScanAxis, ty: &ValueType) -> Result<Tensor, OpError> {
    if parts.is_empty() {
        return Ok(Tensor::new(
            ty.shape.clone(),
            TensorData::zeros(ty.dtype, 0),
        ));
    }
    let mut one = ty.shape.clone();
    one[at.axis] = 1;
    let mut units: Vec<Tensor> = parts.iter().map(|t| t.reshaped(one.clone())).collect();
    if at.reverse {
        units.reverse();
    }
    let refs: Vec<&Tensor> = units.iter().collect();
    let mut out = Concat { axis: at.axis }.eval(&refs, std::slice::from_ref(ty))?;
    Ok(out.remove(0))
}

impl OpDef for If {
    fn name(&self) -> &'static str {
        "If"
    }

    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        check_inputs("If", &self.inputs, inputs)?;
        Ok(self.outputs.clone())
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        eval_here(self, &self.graphs(), x, outputs)
    }
}

impl ControlFlowOp for If {
    fn run(
        &self,
        x: &[&Tensor],
        _: &[ValueType],
        run: &mut RunSubgraph,
    ) -> Result<Vec<Tensor>, OpError> {
        let captured: Vec<Tensor> = x[1..].iter().map(|&t| t.clone()).collect();
        if condition(x[0], "the condition")? {
            run_body(run, 0, &captured, "then_branch")
        } else {
            run_body(run, 1, &captured, "else_branch")
        }
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl OpDef for Loop {
    fn name(&self) -> &'static str {
        "Loop"
    }

    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        check_inputs("Loop", &self.inputs, inputs)?;
        Ok(self.outputs.clone())
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        eval_here(self, &[&self.body], x, outputs)
    }
}

impl ControlFlowOp for Loop {
    fn run(
        &self,
        x: &[&Tensor],
        outputs: &[ValueType],
        run: &mut RunSubgraph,
    ) -> Result<Vec<Tensor>, OpError> {
        let mut at = 0;
        let trip_count =
            match self.has_trip_count {
                true => {
                    at += 1;
                    Some(
                        *x[0].data.to_i64().first().ok_or_else(|| {
                            OpError::Value("the trip count M has no element".into())
                        })?,
                    )
                }
                false => None,
            };
        let mut go = match self.has_condition {
            true => {
                at += 1;
                condition(x[at - 1], "the condition")?
            }
            false => true,
        };
        let mut carried: Vec<Tensor> = x[at..at + self.carried]
            .iter()
            .map(|&t| t.clone())
            .collect();
        let captured = &x[at + self.carried..];
        let scans = &outputs[self.carried..];
        let mut elements: Vec<Vec<Tensor>> = vec![vec![]; scans.len()];
        let limit = max_loop_iterations();
        let mut i: i64 = 0;
        while go && trip_count.is_none_or(|m| i < m) {
            if i as u64 >= limit {
                return Err(OpError::Value(format!(
                    "the loop ran {limit} iterations without ending, the limit \
                     ({MAX_LOOP_ITERATIONS_ENV} raises it)"
                )));
            }
            let mut ins = vec![
                Tensor::from_i64(vec![], vec![i]),
                Tensor::new(vec![], TensorData::Bool(vec![go])),
            ];
            ins.append(&mut carried);
            ins.extend(captured.iter().map(|&t| t.clone()));
            let mut outs = run_body(run, 0, &ins, &format!("iteration {i}"))?;
            let rest = outs.split_off(1 + self.carried);
            go = condition(&outs[0], &format!("iteration {i}: the body's condition"))?;
            carried = outs.split_off(1);
            for (e, t) in elements.iter_mut().zip(rest) {
                e.push(t);
            }
            i += 1;
        }
        for (e, ty) in elements.iter_mut().zip(scans) {
            if e.len() != ty.shape[0] {
                return Err(OpError::Value(format!(
                    "the loop ran {} iterations, but its scan outputs were imported for {}",
                    e.len(),
                    ty.shape[0]
                )));
            }
        }
        let axis0 = ScanAxis {
            axis: 0,
            reverse: false,
        };
        for (e, ty) in elements.iter().zip(scans) {
            carried.push(stack(e, axis0, ty)?);
        }
        Ok(carried)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl OpDef for Scan {
    fn name(&self) -> &'static str {
        "Scan"
    }

    fn num_outputs(&self) -> usize {
        self.outputs.len()
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        check_inputs("Scan", &self.inputs, inputs)?;
        Ok(self.outputs.clone())
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        eval_here(self, &[&self.body], x, outputs)
    }
}

impl ControlFlowOp for Scan {
    fn run(
        &self,
        x: &[&Tensor],
        outputs: &[ValueType],
        run: &mut RunSubgraph,
    ) -> Result<Vec<Tensor>, OpError> {
        let mut states: Vec<Tensor> = x[..self.states].iter().map(|&t| t.clone()).collect();
        let sequences = &x[self.states..self.states + self.scan_inputs.len()];
        let captured = &x[self.states + self.scan_inputs.len()..];
        let scans = &outputs[self.states..];
        let mut elements: Vec<Vec<Tensor>> = vec![vec![]; scans.len()];
        for t in 0..self.length {
            let mut ins = std::mem::take(&mut states);
            for (&seq, at) in sequences.iter().zip(&self.scan_inputs) {
                ins.push(element(seq, *at, t, self.length)?);
            }
            ins.extend(captured.iter().map(|&t| t.clone()));
            let mut outs = run_body(run, 0, &ins, &format!("iteration {t}"))?;
            for (e, t) in elements.iter_mut().zip(outs.split_off(self.states)) {
                e.push(t);
            }
            states = outs;
        }
        for ((e, ty), at) in elements.iter().zip(scans).zip(&self.scan_outputs) {
            states.push(stack(e, *at, ty)?);
        }
        Ok(states)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Element `t` of `seq` along its scan axis (counted from the end when reversed).
fn element(seq: &Tensor, at: ScanAxis, t: usize, length: usize) -> Result<Tensor, OpError> {
    let index = if at.reverse { length - 1 - t } else { t };
    let mut shape = seq.shape.clone();
    shape.remove(at.axis);
    let ty = ValueType::new(seq.dtype(), shape);
    let index = Tensor::from_i64(vec![], vec![index as i64]);
    let mut out = Gather { axis: at.axis }.eval(&[seq, &index], std::slice::from_ref(&ty))?;
    Ok(out.remove(0))
}
