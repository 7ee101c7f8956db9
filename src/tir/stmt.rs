//! The statement IR that lowering produces: loop nests over realized (multi-dimensional)
//! tensors, and after storage flattening, over allocated flat buffers.

use std::convert::Infallible;
use std::fmt;

use super::expr::{write_expr, Expr, Range, TensorId, Var};
use super::layout::BufferLayout;

/// The kind of loop a leaf variable becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForKind {
    /// One iteration after the other.
    Serial,
    /// Iterations spread over threads (when proved independent).
    Parallel,
    /// Iterations as vector lanes.
    Vectorized,
    /// Iterations written out one after the other.
    Unrolled,
}

/// One argument of a micro-kernel call: a region of a tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelArg {
    /// The tensor.
    pub tensor: TensorId,
    /// The region, in logical coordinates of the tensor.
    pub region: Vec<Range>,
    /// Filled by storage flattening: the logical origin of the buffer holding the tensor
    /// (its realize bounds' mins), its logical extents and its layout.
    pub buffer: Option<BufferView>,
    /// For a walk kernel ([`super::CONTRACT`]): the tensorized loops, outermost first,
    /// and how the tensor's indices move along each; the kernel then sees the tensor
    /// as a view over those loops from the region's origin. Empty for a region kernel.
    pub walk: Vec<WalkStep>,
}

/// One loop of a walk kernel's call, as one argument moves along it.
#[derive(Clone, Debug, PartialEq)]
pub struct WalkStep {
    /// The loop's number of iterations.
    pub extent: i64,
    /// How far each index of the tensor moves per iteration (never backwards).
    pub moves: Vec<i64>,
}

/// How logical coordinates of a tensor map into its flat buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferView {
    /// The logical coordinates of the buffer's first element.
    pub origin: Vec<Expr>,
    /// The logical extents of the buffer.
    pub extents: Vec<Expr>,
    /// How logical coordinates map into the buffer.
    pub layout: BufferLayout,
}

/// `for var in min..min+extent { body }`, run as `kind` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Loop {
    /// The loop variable.
    pub var: Var,
    /// The first value of `var`.
    pub min: Expr,
    /// How many iterations run.
    pub extent: Expr,
    /// Serial, parallel, vectorized or unrolled.
    pub kind: ForKind,
    /// The statement run once per iteration.
    pub body: Box<Stmt>,
}

impl Loop {
    /// A loop statement.
    pub fn stmt(var: Var, min: Expr, extent: Expr, kind: ForKind, body: Stmt) -> Stmt {
        Stmt::For(Loop {
            var,
            min,
            extent,
            kind,
            body: Box::new(body),
        })
    }

    /// The same loop header around another body.
    pub fn with_body(&self, body: Stmt) -> Stmt {
        self.with(self.min.clone(), self.extent.clone(), body)
    }

    /// The same loop variable and kind with new bounds and body.
    pub fn with(&self, min: Expr, extent: Expr, body: Stmt) -> Stmt {
        Loop::stmt(self.var.clone(), min, extent, self.kind, body)
    }
}

/// A statement of the tensor IR.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// A loop (see [`Loop`]).
    For(Loop),
    /// The region `bounds` of `tensor` lives during `body` (before flattening).
    Realize {
        /// The tensor.
        tensor: TensorId,
        /// The region realized.
        bounds: Vec<Range>,
        /// Where it lives.
        body: Box<Stmt>,
    },
    /// A flat buffer of `size` elements lives during `body` (after flattening).
    Allocate {
        /// The buffer.
        buffer: TensorId,
        /// Its size in elements.
        size: Expr,
        /// Where it lives.
        body: Box<Stmt>,
    },
    /// Write of a tensor element by logical index (before flattening).
    Provide {
        /// The tensor written.
        tensor: TensorId,
        /// The element's logical index.
        indices: Vec<Expr>,
        /// The value written.
        value: Expr,
    },
    /// Write of a flat buffer element (after flattening).
    Store {
        /// The buffer written.
        buffer: TensorId,
        /// The element's position in the buffer.
        index: Expr,
        /// The value written.
        value: Expr,
    },
    /// Statements run in order.
    Seq(Vec<Stmt>),
    /// `if cond { then_case } else { else_case }`.
    IfThenElse {
        /// The condition.
        cond: Expr,
        /// Run when it holds.
        then_case: Box<Stmt>,
        /// Run when it does not.
        else_case: Option<Box<Stmt>>,
        /// The condition is expected to hold almost always (a loop-partitioning hint).
        likely: bool,
    },
    /// A call to a named micro-kernel on tensor regions (from tensorize).
    KernelCall {
        /// The micro-kernel.
        name: String,
        /// Its regions: the output first.
        args: Vec<KernelArg>,
    },
    /// `cond` holds throughout `body`: information for later passes, checked by the
    /// interpreter.
    Assume {
        /// The fact.
        cond: Expr,
        /// Where it holds.
        body: Box<Stmt>,
    },
}

impl Stmt {
    /// A sequence with nested sequences flattened and empty ones dropped (one item stands alone).
    pub fn seq(items: Vec<Stmt>) -> Stmt {
        let mut flat = Vec::new();
        for s in items {
            match s {
                Stmt::Seq(v) => flat.extend(v),
                s => flat.push(s),
            }
        }
        if flat.len() == 1 {
            flat.pop().expect("one element")
        } else {
            Stmt::Seq(flat)
        }
    }

    /// The same statement with each direct child statement replaced by `f(child)`;
    /// expressions and everything else are kept. Passes that treat most nodes
    /// alike recurse through this instead of rebuilding every variant.
    pub fn map_children(&self, f: &mut dyn FnMut(&Stmt) -> Stmt) -> Stmt {
        let Ok(s) = self.try_map_children(&mut |c| Ok::<_, Infallible>(f(c)));
        s
    }

    /// [`Stmt::map_children`] with a fallible `f`: the first error, children
    /// visited in order.
    pub fn try_map_children<E>(
        &self,
        f: &mut dyn FnMut(&Stmt) -> Result<Stmt, E>,
    ) -> Result<Stmt, E> {
        let mut child = |b: &Stmt| f(b).map(Box::new);
        Ok(match self {
            Stmt::For(l) => l.with_body(*child(&l.body)?),
            Stmt::Realize {
                tensor,
                bounds,
                body,
            } => Stmt::Realize {
                tensor: *tensor,
                bounds: bounds.clone(),
                body: child(body)?,
            },
            Stmt::Allocate { buffer, size, body } => Stmt::Allocate {
                buffer: *buffer,
                size: size.clone(),
                body: child(body)?,
            },
            Stmt::Seq(v) => Stmt::seq(
                v.iter()
                    .map(|x| child(x).map(|b| *b))
                    .collect::<Result<_, E>>()?,
            ),
            Stmt::IfThenElse {
                cond,
                then_case,
                else_case,
                likely,
            } => Stmt::IfThenElse {
                cond: cond.clone(),
                then_case: child(then_case)?,
                else_case: else_case.as_deref().map(&mut child).transpose()?,
                likely: *likely,
            },
            Stmt::Assume { cond, body } => Stmt::Assume {
                cond: cond.clone(),
                body: child(body)?,
            },
            leaf => leaf.clone(),
        })
    }

    /// Rebuilds the statement bottom-up, applying `fs` to every statement (after its
    /// children) and `fe` to every expression.
    pub fn rewrite(
        &self,
        fs: &mut dyn FnMut(Stmt) -> Stmt,
        fe: &mut dyn FnMut(&Expr) -> Expr,
    ) -> Stmt {
        let s = self.map_children(&mut |c| c.rewrite(fs, fe));
        fs(s.map_exprs(fe))
    }

    /// The same statement with each of its own expressions (not those of its child
    /// statements) replaced by `fe(expr)`.
    pub fn map_exprs(mut self, fe: &mut dyn FnMut(&Expr) -> Expr) -> Stmt {
        let mut map = |e: &mut Expr| *e = fe(e);
        match &mut self {
            Stmt::For(l) => {
                map(&mut l.min);
                map(&mut l.extent);
            }
            Stmt::Realize { bounds, .. } => bounds.iter_mut().for_each(|r| r.map(&mut map)),
            Stmt::Allocate { size, .. } => map(size),
            Stmt::Provide { indices, value, .. } => {
                indices.iter_mut().for_each(&mut map);
                map(value);
            }
            Stmt::Store { index, value, .. } => {
                map(index);
                map(value);
            }
            Stmt::IfThenElse { cond, .. } | Stmt::Assume { cond, .. } => map(cond),
            Stmt::KernelCall { args, .. } => {
                for a in args {
                    a.region.iter_mut().for_each(|r| r.map(&mut map));
                    if let Some(b) = &mut a.buffer {
                        b.origin.iter_mut().chain(&mut b.extents).for_each(&mut map);
                    }
                }
            }
            Stmt::Seq(_) => {}
        }
        self
    }

    /// Calls `f` on every expression of the statement and of its children, parents
    /// first, without rebuilding them (as `rewrite` would).
    pub fn visit_exprs(&self, f: &mut dyn FnMut(&Expr)) {
        self.visit(&mut |s| match s {
            Stmt::For(l) => {
                f(&l.min);
                f(&l.extent);
            }
            Stmt::Realize { bounds, .. } => bounds.iter().for_each(|r| {
                f(&r.min);
                f(&r.extent);
            }),
            Stmt::Allocate { size, .. } => f(size),
            Stmt::Provide { indices, value, .. } => {
                indices.iter().for_each(&mut *f);
                f(value);
            }
            Stmt::Store { index, value, .. } => {
                f(index);
                f(value);
            }
            Stmt::IfThenElse { cond, .. } | Stmt::Assume { cond, .. } => f(cond),
            Stmt::KernelCall { args, .. } => {
                for a in args {
                    a.region.iter().for_each(|r| {
                        f(&r.min);
                        f(&r.extent);
                    });
                    if let Some(b) = &a.buffer {
                        b.origin.iter().chain(&b.extents).for_each(&mut *f);
                    }
                }
            }
            Stmt::Seq(_) => {}
        });
    }

    /// Calls `f` on every statement, parents first.
    pub fn visit(&self, f: &mut dyn FnMut(&Stmt)) {
        f(self);
        match self {
            Stmt::For(Loop { body, .. })
            | Stmt::Realize { body, .. }
            | Stmt::Allocate { body, .. }
            | Stmt::Assume { body, .. } => body.visit(f),
            Stmt::Seq(v) => v.iter().for_each(|s| s.visit(f)),
            Stmt::IfThenElse {
                then_case,
                else_case,
                ..
            } => {
                then_case.visit(f);
                if let Some(e) = else_case {
                    e.visit(f);
                }
            }
            Stmt::Provide { .. } | Stmt::Store { .. } | Stmt::KernelCall { .. } => {}
        }
    }

    /// Prints the statement with tensor names from `names`.
    pub fn display<'a>(&'a self, names: &'a dyn Fn(TensorId) -> String) -> StmtDisplay<'a> {
        StmtDisplay { s: self, names }
    }
}

/// A statement printed with tensor names.
pub struct StmtDisplay<'a> {
    s: &'a Stmt,
    names: &'a dyn Fn(TensorId) -> String,
}

impl fmt::Display for StmtDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write_stmt(f, self.s, self.names, 0)
    }
}

struct E<'a>(&'a Expr, &'a dyn Fn(TensorId) -> String);
impl fmt::Display for E<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write_expr(f, self.0, self.1)
    }
}

fn write_stmt(
    f: &mut fmt::Formatter,
    s: &Stmt,
    n: &dyn Fn(TensorId) -> String,
    ind: usize,
) -> fmt::Result {
    let pad = "  ".repeat(ind);
    let list = |v: &[Expr]| {
        v.iter()
            .map(|e| E(e, n).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let ranges = |v: &[Range]| {
        v.iter()
            .map(|r| format!("[{}, {}]", E(&r.min, n), E(&r.extent, n)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match s {
        Stmt::For(l) => {
            let k = match l.kind {
                ForKind::Serial => "for",
                ForKind::Parallel => "parallel for",
                ForKind::Vectorized => "vectorized for",
                ForKind::Unrolled => "unrolled for",
            };
            writeln!(
                f,
                "{pad}{k} ({}, {}, {}) {{",
                l.var.name,
                E(&l.min, n),
                E(&l.extent, n)
            )?;
            write_stmt(f, &l.body, n, ind + 1)?;
            writeln!(f, "{pad}}}")
        }
        Stmt::Realize {
            tensor,
            bounds,
            body,
        } => {
            writeln!(f, "{pad}realize {}({}) {{", n(*tensor), ranges(bounds))?;
            write_stmt(f, body, n, ind + 1)?;
            writeln!(f, "{pad}}}")
        }
        Stmt::Allocate { buffer, size, body } => {
            writeln!(f, "{pad}allocate {}[{}]", n(*buffer), E(size, n))?;
            write_stmt(f, body, n, ind)
        }
        Stmt::Provide {
            tensor,
            indices,
            value,
        } => writeln!(
            f,
            "{pad}{}({}) = {}",
            n(*tensor),
            list(indices),
            E(value, n)
        ),
        Stmt::Store {
            buffer,
            index,
            value,
        } => writeln!(f, "{pad}{}[{}] = {}", n(*buffer), E(index, n), E(value, n)),
        Stmt::Seq(v) => v.iter().try_for_each(|s| write_stmt(f, s, n, ind)),
        Stmt::IfThenElse {
            cond,
            then_case,
            else_case,
            likely,
        } => {
            if *likely {
                writeln!(f, "{pad}if (likely({})) {{", E(cond, n))?;
            } else {
                writeln!(f, "{pad}if ({}) {{", E(cond, n))?;
            }
            write_stmt(f, then_case, n, ind + 1)?;
            if let Some(e) = else_case {
                writeln!(f, "{pad}}} else {{")?;
                write_stmt(f, e, n, ind + 1)?;
            }
            writeln!(f, "{pad}}}")
        }
        Stmt::KernelCall { name, args } => {
            let a: Vec<String> = args
                .iter()
                .map(|a| {
                    let walk: Vec<String> = a
                        .walk
                        .iter()
                        .map(|w| format!("{}x{:?}", w.extent, w.moves))
                        .collect();
                    let walk = match walk.is_empty() {
                        true => String::new(),
                        false => format!(" walk {}", walk.join(" ")),
                    };
                    format!("{}({}{walk})", n(a.tensor), ranges(&a.region))
                })
                .collect();
            writeln!(f, "{pad}call {name}({})", a.join(", "))
        }
        Stmt::Assume { cond, body } => {
            writeln!(f, "{pad}assume({})", E(cond, n))?;
            write_stmt(f, body, n, ind)
        }
    }
}
