//! An interpreter of the flattened statement IR, used as the executable oracle in tests.
//! Values are `f64`; every load and store is bounds-checked against its buffer.

use std::collections::HashMap;

use super::error::{KernelError, TirError};
use super::eval::{eval_scalar, Value};
use super::expr::{Expr, TensorId};
use super::lower::LoweredFunc;
use super::stmt::{KernelArg, Loop, Stmt};
use super::{CONTRACT, CONTRACT_INTO};

/// What a run did, for tests that check iteration counts and buffer sizes.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Extents with which each loop variable (by name) was entered, in order.
    pub loop_extents: HashMap<String, Vec<i64>>,
    /// Largest allocation of every intermediate buffer (by tensor name), in elements.
    pub max_alloc: HashMap<String, i64>,
    /// Number of stores into every buffer (by tensor name).
    pub stores: HashMap<String, u64>,
    /// Number of micro-kernel calls by kernel name.
    pub kernel_calls: HashMap<String, u64>,
}

/// A region of a buffer handed to a micro-kernel: logical coordinates relative to the
/// region's origin.
pub struct KernelView<'a> {
    /// The region's extents (for a walk, the extents of its loops).
    pub extents: Vec<i64>,
    origin: Vec<i64>,
    /// For a walk: per loop, how the tensor's indices move along it.
    moves: Vec<Vec<i64>>,
    layout: &'a super::layout::BufferLayout,
    buf_extents: Vec<i64>,
    data: &'a mut Vec<f64>,
}

impl KernelView<'_> {
    fn offset(&self, idx: &[i64]) -> Result<usize, KernelError> {
        if idx.len() != self.extents.len()
            || idx.iter().zip(&self.extents).any(|(i, e)| *i < 0 || i >= e)
        {
            return Err(KernelError(format!(
                "kernel access {idx:?} is outside its region {:?}",
                self.extents
            )));
        }
        let abs: Vec<i64> = match self.moves.is_empty() {
            true => idx.iter().zip(&self.origin).map(|(i, o)| i + o).collect(),
            false => self
                .origin
                .iter()
                .enumerate()
                .map(|(d, o)| {
                    o + idx
                        .iter()
                        .zip(&self.moves)
                        .map(|(i, m)| i * m[d])
                        .sum::<i64>()
                })
                .collect(),
        };
        let f = self.layout.flatten_const(&abs, &self.buf_extents);
        usize::try_from(f)
            .ok()
            .filter(|f| *f < self.data.len())
            .ok_or_else(|| KernelError(format!("kernel access {idx:?} is outside its buffer")))
    }
    /// The element at `idx` of the region.
    pub fn get(&self, idx: &[i64]) -> Result<f64, KernelError> {
        Ok(self.data[self.offset(idx)?])
    }
    /// Writes the element at `idx` of the region.
    pub fn set(&mut self, idx: &[i64], v: f64) -> Result<(), KernelError> {
        let o = self.offset(idx)?;
        self.data[o] = v;
        Ok(())
    }
}

/// A micro-kernel: receives the output region first, then the input regions.
pub type Kernel = Box<dyn Fn(&mut [KernelView]) -> Result<(), KernelError>>;

/// Runs lowered functions on host buffers, checking every access.
#[derive(Default)]
pub struct Interpreter {
    kernels: HashMap<String, Kernel>,
}

impl Interpreter {
    /// An interpreter with the micro-kernels the IR defines, [`CONTRACT`] and
    /// [`CONTRACT_INTO`].
    pub fn new() -> Interpreter {
        Interpreter::default()
            .with_kernel(CONTRACT, Box::new(|v| contract(v, false)))
            .with_kernel(CONTRACT_INTO, Box::new(|v| contract(v, true)))
    }

    /// The interpreter with micro-kernel `k` registered as `name`.
    pub fn with_kernel(mut self, name: &str, k: Kernel) -> Interpreter {
        self.kernels.insert(name.to_string(), k);
        self
    }

    /// Runs `f` on the given parameter buffers (by tensor name, in each parameter's
    /// layout); returns the final contents of all parameter buffers.
    pub fn run(
        &self,
        f: &LoweredFunc,
        inputs: &HashMap<String, Vec<f64>>,
    ) -> Result<(HashMap<String, Vec<f64>>, RunStats), TirError> {
        let mut m = Machine {
            f,
            bufs: HashMap::new(),
            vars: HashMap::new(),
            stats: RunStats::default(),
            kernels: &self.kernels,
        };
        for t in &f.params {
            let op = f.graph.op(*t);
            let size = f.layouts[t].size_const(&op.shape) as usize;
            let data = match inputs.get(&op.name) {
                Some(d) if d.len() == size => d.clone(),
                Some(d) => {
                    return Err(TirError::Eval(format!(
                        "buffer `{}` has {} elements, its layout needs {size}",
                        op.name,
                        d.len()
                    )))
                }
                None if f.graph.op(*t).kind == super::compute::OpKind::Placeholder => {
                    return Err(TirError::Eval(format!(
                        "no data given for input `{}`",
                        op.name
                    )))
                }
                None => vec![0.0; size],
            };
            m.bufs.insert(*t, data);
        }
        m.exec(&f.body)?;
        let out = f
            .params
            .iter()
            .map(|t| {
                (
                    f.graph.op(*t).name.clone(),
                    m.bufs.remove(t).unwrap_or_default(),
                )
            })
            .collect();
        Ok((out, m.stats))
    }
}

struct Machine<'a> {
    f: &'a LoweredFunc,
    bufs: HashMap<TensorId, Vec<f64>>,
    vars: HashMap<u64, i64>,
    stats: RunStats,
    kernels: &'a HashMap<String, Kernel>,
}

impl Machine<'_> {
    fn eval(&self, e: &Expr) -> Result<Value, TirError> {
        eval_scalar(e, &|v| self.vars.get(&v.id).copied(), &|b, i| {
            self.bufs
                .get(&b)
                .and_then(|d| usize::try_from(i).ok().and_then(|i| d.get(i).copied()))
        })
        .map_err(|e| TirError::Eval(self.name_buffers(e.to_string())))
    }

    fn name_buffers(&self, m: String) -> String {
        let mut m = m;
        for (i, op) in self.f.graph.ops.iter().enumerate() {
            m = m.replace(&format!("buffer t{i} "), &format!("buffer `{}` ", op.name));
        }
        m
    }

    fn int(&self, e: &Expr) -> Result<i64, TirError> {
        self.eval(e).map(Value::as_i64)
    }

    fn exec(&mut self, s: &Stmt) -> Result<(), TirError> {
        match s {
            Stmt::For(Loop {
                var,
                min,
                extent,
                body,
                ..
            }) => {
                let (lo, n) = (self.int(min)?, self.int(extent)?);
                self.stats
                    .loop_extents
                    .entry(var.name.to_string())
                    .or_default()
                    .push(n);
                for i in lo..lo + n {
                    self.vars.insert(var.id, i);
                    self.exec(body)?;
                }
                self.vars.remove(&var.id);
            }
            Stmt::Allocate { buffer, size, body } => {
                let n = self.int(size)?;
                if n < 0 {
                    return Err(TirError::Eval(format!(
                        "negative allocation of `{}`",
                        self.f.graph.op(*buffer).name
                    )));
                }
                let e = self
                    .stats
                    .max_alloc
                    .entry(self.f.graph.op(*buffer).name.clone())
                    .or_insert(0);
                *e = (*e).max(n);
                // Fresh buffers hold NaN so that reading an element never written shows up.
                let old = self.bufs.insert(*buffer, vec![f64::NAN; n as usize]);
                self.exec(body)?;
                match old {
                    Some(o) => self.bufs.insert(*buffer, o),
                    None => self.bufs.remove(buffer),
                };
            }
            Stmt::Store {
                buffer,
                index,
                value,
            } => {
                let v = self.eval(value)?.as_f64();
                let i = self.int(index)?;
                let name = &self.f.graph.op(*buffer).name;
                let buf = self.bufs.get_mut(buffer).ok_or_else(|| {
                    TirError::Eval(format!("store to `{name}` outside its allocation"))
                })?;
                let len = buf.len();
                let slot = usize::try_from(i)
                    .ok()
                    .and_then(|i| buf.get_mut(i))
                    .ok_or_else(|| {
                        TirError::Eval(format!(
                            "store to `{name}` at {i} is out of bounds (size {len})"
                        ))
                    })?;
                *slot = v;
                *self.stats.stores.entry(name.clone()).or_insert(0) += 1;
            }
            Stmt::Seq(v) => v.iter().try_for_each(|x| self.exec(x))?,
            Stmt::IfThenElse {
                cond,
                then_case,
                else_case,
                ..
            } => {
                if self.eval(cond)?.as_f64() != 0.0 {
                    self.exec(then_case)?;
                } else if let Some(e) = else_case {
                    self.exec(e)?;
                }
            }
            Stmt::Assume { cond, body } => {
                if self.eval(cond)?.as_f64() == 0.0 {
                    return Err(TirError::Eval(format!("assumption {cond} does not hold")));
                }
                self.exec(body)?;
            }
            Stmt::KernelCall { name, args } => self.call(name, args)?,
            Stmt::Realize { .. } | Stmt::Provide { .. } => {
                return Err(TirError::Eval(
                    "the interpreter runs flattened statements only".into(),
                ))
            }
        }
        Ok(())
    }

    fn call(&mut self, name: &str, args: &[KernelArg]) -> Result<(), TirError> {
        let k = self
            .kernels
            .get(name)
            .ok_or_else(|| TirError::Eval(format!("micro-kernel `{name}` is not registered")))?;
        *self.stats.kernel_calls.entry(name.to_string()).or_insert(0) += 1;
        let mut specs = Vec::new();
        for (i, a) in args.iter().enumerate() {
            if args[..i].iter().any(|p| p.tensor == a.tensor) {
                return Err(TirError::Eval(format!(
                    "kernel `{name}` gets the buffer of `{}` twice",
                    self.f.graph.op(a.tensor).name
                )));
            }
            let view = a
                .buffer
                .as_ref()
                .ok_or_else(|| TirError::Eval("kernel call before storage flattening".into()))?;
            let origin: Vec<i64> = a
                .region
                .iter()
                .zip(&view.origin)
                .map(|(r, o)| Ok(self.int(&r.min)? - self.int(o)?))
                .collect::<Result<_, TirError>>()?;
            let extents: Vec<i64> = match a.walk.is_empty() {
                true => a
                    .region
                    .iter()
                    .map(|r| self.int(&r.extent))
                    .collect::<Result<_, _>>()?,
                false => a.walk.iter().map(|w| w.extent).collect(),
            };
            let moves: Vec<Vec<i64>> = a.walk.iter().map(|w| w.moves.clone()).collect();
            let buf_extents: Vec<i64> = view
                .extents
                .iter()
                .map(|e| self.int(e))
                .collect::<Result<_, _>>()?;
            if !self.bufs.contains_key(&a.tensor) {
                return Err(TirError::Eval(format!(
                    "kernel `{name}` argument `{}` has no buffer",
                    self.f.graph.op(a.tensor).name
                )));
            }
            specs.push((origin, extents, moves, buf_extents, &view.layout));
        }
        // Take the buffers out so that each view borrows its own mutably.
        let mut taken: Vec<Vec<f64>> = args
            .iter()
            .map(|a| self.bufs.remove(&a.tensor).unwrap_or_default())
            .collect();
        let result = {
            let mut views: Vec<KernelView> = taken
                .iter_mut()
                .zip(specs)
                .map(
                    |(data, (origin, extents, moves, buf_extents, layout))| KernelView {
                        extents,
                        origin,
                        moves,
                        layout,
                        buf_extents,
                        data,
                    },
                )
                .collect();
            k(&mut views)
        };
        for (a, d) in args.iter().zip(taken) {
            self.bufs.insert(a.tensor, d);
        }
        result.map_err(|e| TirError::Eval(format!("micro-kernel `{name}`: {e}")))
    }
}

/// [`CONTRACT`] on the interpreter's views: `out[p] += a[p] * b[p]` at every point
/// of the walk, the output first set to zero when `into` ([`CONTRACT_INTO`]).
fn contract(v: &mut [KernelView], into: bool) -> Result<(), KernelError> {
    let [out, a, b] = v else {
        return Err(KernelError(format!(
            "contract takes 3 views, got {}",
            v.len()
        )));
    };
    let extents = out.extents.clone();
    if a.extents != extents || b.extents != extents {
        return Err(KernelError("contract's views walk different loops".into()));
    }
    let points: i64 = extents.iter().product();
    if into {
        for p in 0..points {
            out.set(&super::expr::unflatten(p, &extents), 0.0)?;
        }
    }
    for p in 0..points {
        let idx = super::expr::unflatten(p, &extents);
        let sum = out.get(&idx)? + a.get(&idx)? * b.get(&idx)?;
        out.set(&idx, sum)?;
    }
    Ok(())
}
