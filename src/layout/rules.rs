//! Rewrite rules kept as text in `rules/*.rules`, loaded at run time.
//!
//! One rule per line: `name: (lhs) => (rhs)`, optionally followed by
//! `if cond1, cond2`; `#` starts a comment. Patterns are s-expressions over the
//! e-graph language (`egraph::Lang`), `?x` a pattern variable. A condition is
//! code named in the rule: it reads variables bound by the left side, may
//! refuse the match, and may bind new variables for the right side (a pad value
//! it computed, an op it built). `CONDITIONS` lists each with what it reads and
//! binds; loading checks both, so a rule file cannot use a variable nobody binds.

use super::egraph::{
    entry_of, layout_of, pad_fact, pad_of, tensor_of, Atom, Firing, LEGraph, Lang, LayoutAnalysis,
    NodeError, OpEntry, TensorInfo,
};
use super::{unary_flow, Digit, Layout, PadValue};
use crate::graph::{merge_spans, Op};
use crate::ops::{Reshape, Transpose};
use egg::{Applier, ENodeOrVar, Id, Language, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

mod activation_conditions;
mod graph_conditions;
mod normalization_conditions;

/// A rule file that cannot be loaded, naming the file and line.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// A line of a rule file does not parse.
    #[error("{file}:{line}: {message}")]
    Syntax {
        /// The rule file.
        file: String,
        /// The line (from 1).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A rule folder or file could not be read.
    #[error("{path}: {message}")]
    Io {
        /// The folder or file.
        path: String,
        /// The I/O error.
        message: String,
    },
}

/// Why a condition did not let a match through.
#[derive(Debug)]
pub enum Refusal {
    /// The match does not meet the condition: the rule does not apply here.
    NoMatch,
    /// The condition could not be evaluated (an inconsistent e-graph, a
    /// malformed operand): a bug to report, never a silent "no".
    Failed(String),
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal::Failed(message)
    }
}

impl From<NodeError> for Refusal {
    fn from(e: NodeError) -> Refusal {
        Refusal::Failed(e.to_string())
    }
}

type Check = fn(&mut LEGraph, &mut Subst) -> Result<(), Refusal>;

/// A condition a rule may name: the variables it reads and binds, and its code.
pub struct Condition {
    /// The name rules use for it.
    pub name: &'static str,
    /// The pattern variables it reads.
    pub reads: &'static [&'static str],
    /// The variables it binds for the rule's right-hand side.
    pub binds: &'static [&'static str],
    check: Check,
}

fn v(name: &str) -> Var {
    name.parse().expect("condition variable names are valid")
}

fn get(s: &Subst, name: &str) -> Id {
    s[v(name)]
}

fn bind_atom(eg: &mut LEGraph, s: &mut Subst, name: &str, a: Atom) {
    let id = eg.add(Lang::Atom(a));
    s.insert(v(name), id);
}

/// `value` as the pad of a tensor of shape `logical` in `layout`: undef when
/// the layout does not pad it, so that equal buffers get equal nodes.
fn canonical_pad(layout: &Layout, logical: &[usize], value: PadValue) -> PadValue {
    match pad_fact(layout, logical, value, "") {
        Some(_) => value,
        None => PadValue::Undef,
    }
}

/// The rule does not apply; `why` documents the case where it is called.
fn no_match(why: &str) -> Refusal {
    let _ = why;
    Refusal::NoMatch
}

fn refuse<T>(why: &str) -> Result<T, Refusal> {
    Err(no_match(why))
}

/// xform(a -> a, q) of x is x when a does not pad x, or x's padding is known
/// to be what the transform writes (undef only matches undef: a transform free
/// to write anything must not join a class that claims a value).
fn restores_padding(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (q, x) = (pad_of(eg, get(s, "?q"))?, tensor_of(eg, get(s, "?x"))?);
    match &x.pad {
        None => Ok(()),
        Some(f) if f.value == q => Ok(()),
        Some(_) => refuse("the padding of x is not known to hold the pad value"),
    }
}

/// The unary op of entry `id`.
fn unary_op(eg: &LEGraph, id: Id) -> Result<crate::graph::UnaryOp, Refusal> {
    match entry_of(eg, id)?.op {
        Op::Unary(u) => Ok(u),
        _ => refuse("not a unary op"),
    }
}

/// xform(a -> b, q, f(x)) = f(xform(a -> b, p, x)) for a p with f(p) = q.
fn pad_before_unary(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let u = unary_op(eg, get(s, "?f"))?;
    let (b, q, x) = (
        layout_of(eg, get(s, "?b"))?,
        pad_of(eg, get(s, "?q"))?,
        tensor_of(eg, get(s, "?x"))?,
    );
    let p = if canonical_pad(b, &x.logical, q) == PadValue::Undef {
        PadValue::Undef
    } else {
        // q itself (a fixed point: relu(0) = 0) or 0 (exp(0) = 1) are the
        // values worth trying; no other preimage is looked for.
        let want = q.known().expect("canonical known pad");
        [want, 0.0]
            .into_iter()
            .map(PadValue::Known)
            .find(|&c| unary_flow(u, c) == q)
            .ok_or_else(|| no_match("no pad value that the function maps to the wanted one"))?
    };
    bind_atom(eg, s, "?p", Atom::Pad(p));
    Ok(())
}

/// The entry of `inner` placed as given, its output padding holding `pad`.
fn placed_with(
    inner: Op,
    xs: &[&TensorInfo],
    out_layout: Layout,
    pad: PadValue,
) -> Result<OpEntry, Refusal> {
    let dtypes: Vec<_> = xs.iter().map(|x| x.dtype).collect();
    let inputs = xs
        .iter()
        .map(|x| (x.layout.clone(), x.logical.clone()))
        .collect();
    Ok(OpEntry::in_layout(
        inner,
        inputs,
        vec![(out_layout, pad)],
        &dtypes,
    )?)
}

/// reshape(xform(a -> row-major, x)) = xform(a2 -> row-major b2, reshape placed
/// from a to a2 (x)) when a keeps every axis's outer digit in logical order
/// with the blocks last, and the reshape keeps each blocked axis whole (same
/// extent, same position in the flattened order): then a2 blocks the same
/// axes the same way and the reshape moves no byte.
fn reshape_keeps_blocks(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let entry = entry_of(eg, get(s, "?k"))?.clone();
    let b = layout_of(eg, get(s, "?b"))?;
    let x = tensor_of(eg, get(s, "?x"))?.clone();
    let a = x.layout.clone();
    let Op::Reshape(Reshape { shape: target }) = &entry.op else {
        return refuse("not a reshape");
    };
    let r = a.rank();
    let outer_first = (0..r).all(|i| a.order()[i] == Digit { axis: i, level: 0 });
    if !b.is_identity() || !a.is_blocked() || !outer_first {
        return refuse("only a blocked layout with blocks last moves across a reshape");
    }
    let src = &x.logical;
    let mut axis_map = vec![None; r];
    for i in (0..r).filter(|&i| !a.factors(i).is_empty()) {
        let before: usize = src[..i].iter().product();
        let j = (0..target.len())
            .find(|&j| target[j] == src[i] && target[..j].iter().product::<usize>() == before)
            .ok_or_else(|| no_match("the reshape splits or merges a blocked axis"))?;
        axis_map[i] = Some(j);
    }
    let mut factors = vec![Vec::new(); target.len()];
    let mut order: Vec<Digit> = (0..target.len())
        .map(|axis| Digit { axis, level: 0 })
        .collect();
    for d in &a.order()[r..] {
        let j = axis_map[d.axis].expect("blocked axes are mapped");
        factors[j].push(a.factors(d.axis)[d.level - 1]);
        order.push(Digit {
            axis: j,
            level: factors[j].len(),
        });
    }
    let names = Layout::identity(target.len()).map_err(|e| e.to_string())?;
    let a2 = Layout::new(names.to_string().chars().collect(), factors, order)
        .map_err(|e| e.to_string())?;
    // The blocked axes move whole, padding and all: it holds what it held.
    let e = placed_with(entry.op.clone(), &[&x], a2.clone(), x.pad_value())?;
    let k = eg.analysis.intern(e);
    bind_atom(eg, s, "?k2", Atom::Op(k));
    bind_atom(eg, s, "?a2", Atom::Layout(a2));
    bind_atom(eg, s, "?b2", Atom::Layout(names));
    bind_atom(eg, s, "?q", Atom::Pad(PadValue::Undef));
    Ok(())
}

fn perm_of(eg: &LEGraph, id: Id) -> Result<(Vec<usize>, OpEntry), Refusal> {
    let e = entry_of(eg, id)?;
    match &e.op {
        Op::Transpose(Transpose { perm }) => Ok((perm.clone(), e.clone())),
        _ => refuse("not a transpose"),
    }
}

/// transpose(p, transpose(q, x)) = transpose(r, x) with r[i] = q[p[i]].
fn compose_perms(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (p, outer) = perm_of(eg, get(s, "?p"))?;
    let (q, _) = perm_of(eg, get(s, "?q"))?;
    let r: Vec<usize> = p.iter().map(|&i| q[i]).collect();
    let k = eg.analysis.intern(OpEntry {
        op: Op::Transpose(Transpose { perm: r }),
        outputs: outer.outputs,
    });
    bind_atom(eg, s, "?r", Atom::Op(k));
    Ok(())
}

fn identity_perm(eg: &mut LEGraph, s: &mut Subst) -> Result<(), Refusal> {
    let (p, _) = perm_of(eg, get(s, "?p"))?;
    if p.iter().enumerate().all(|(i, &x)| i == x) {
        Ok(())
    } else {
        refuse("not the identity permutation")
    }
}

/// Every condition a rule file may name.
pub const CONDITIONS: &[Condition] = &[
    Condition {
        name: "restores-padding",
        reads: &["?q", "?x"],
        binds: &[],
        check: restores_padding,
    },
    Condition {
        name: "pad-before-unary",
        reads: &["?f", "?b", "?q", "?x"],
        binds: &["?p"],
        check: pad_before_unary,
    },
    Condition {
        name: "reshape-keeps-blocks",
        reads: &["?k", "?b", "?x"],
        binds: &["?k2", "?a2", "?b2", "?q"],
        check: reshape_keeps_blocks,
    },
    Condition {
        name: "compose-perms",
        reads: &["?p", "?q"],
        binds: &["?r"],
        check: compose_perms,
    },
    Condition {
        name: "identity-perm",
        reads: &["?p"],
        binds: &[],
        check: identity_perm,
    },
    Condition {
        name: "window-absorbs-pad",
        reads: &["?w", "?p", "?x"],
        binds: &["?w2"],
        check: graph_conditions::window_absorbs_pad,
    },
    Condition {
        name: "pad-through-transpose",
        reads: &["?t", "?p", "?x"],
        binds: &["?t2", "?p2"],
        check: graph_conditions::pad_through_transpose,
    },
    Condition {
        name: "channel-scale",
        reads: &["?m", "?c", "?s", "?w"],
        binds: &["?rb", "?rw"],
        check: graph_conditions::channel_scale,
    },
    Condition {
        name: "channel-shift",
        reads: &["?a", "?c", "?s", "?w"],
        binds: &["?rb", "?rw"],
        check: graph_conditions::channel_shift,
    },
    Condition {
        name: "adds",
        reads: &["?a"],
        binds: &[],
        check: graph_conditions::adds,
    },
    Condition {
        name: "constant-commutes",
        reads: &["?m", "?k", "?y"],
        binds: &[],
        check: graph_conditions::constant_commutes,
    },
    Condition {
        name: "constant-through-transpose",
        reads: &["?t", "?s"],
        binds: &["?rs", "?ti"],
        check: graph_conditions::constant_through_transpose,
    },
    Condition {
        name: "slice-cuts-back",
        reads: &["?s", "?p", "?x"],
        binds: &[],
        check: graph_conditions::slice_cuts_back,
    },
    Condition {
        name: "hard-sigmoid-form",
        reads: &["?m", "?c", "?a", "?k", "?s", "?x"],
        binds: &["?h"],
        check: activation_conditions::hard_sigmoid_form,
    },
    Condition {
        name: "hard-swish-form",
        reads: &["?m", "?h", "?x"],
        binds: &["?hs"],
        check: activation_conditions::hard_swish_form,
    },
    Condition {
        name: "gelu-erf-form",
        reads: &["?m1", "?m2", "?a", "?e", "?d", "?k", "?one", "?half", "?x"],
        binds: &["?g"],
        check: activation_conditions::gelu_erf_form,
    },
    Condition {
        name: "gelu-erfc-form",
        reads: &[
            "?m1", "?m2", "?s", "?e", "?d", "?n", "?k", "?one", "?half", "?x",
        ],
        binds: &["?g"],
        check: activation_conditions::gelu_erfc_form,
    },
    Condition {
        name: "gelu-tanh-form",
        reads: &[
            "?m1", "?m2", "?m3", "?m4", "?a1", "?a2", "?t", "?p1", "?p2", "?c", "?k", "?one",
            "?half", "?x",
        ],
        binds: &["?g"],
        check: activation_conditions::gelu_tanh_form,
    },
    Condition {
        name: "layer-norm-form",
        reads: &["?ReduceMean", "?eps", "?x"],
        binds: &["?ln"],
        check: normalization_conditions::layer_norm_form,
    },
    Condition {
        name: "rms-norm-form",
        reads: &["?ReduceMean", "?eps", "?x"],
        binds: &["?ln"],
        check: normalization_conditions::rms_norm_form,
    },
    Condition {
        name: "global-pool-row-mean",
        reads: &["?x"],
        binds: &["?mean"],
        check: normalization_conditions::global_pool_row_mean,
    },
    Condition {
        name: "normalization-scale",
        reads: &["?gamma", "?ln"],
        binds: &["?rg"],
        check: normalization_conditions::normalization_scale,
    },
    Condition {
        name: "normalization-shift",
        reads: &["?beta", "?ln"],
        binds: &["?rb"],
        check: normalization_conditions::normalization_shift,
    },
    Condition {
        name: "keeps-shape",
        reads: &["?k", "?x"],
        binds: &[],
        check: graph_conditions::keeps_shape,
    },
];

/// The right side of a rule, applied after its conditions. Classes it creates
/// carry the spans of every class the left side matched, so a node built from
/// several source nodes keeps all their spans.
#[derive(Clone)]
struct RuleApplier {
    lhs: PatternAst<Lang>,
    rhs: PatternAst<Lang>,
    conditions: Vec<&'static Condition>,
    needs: Vec<Var>,
    /// The left side's typed variables, each with the op kind it matches.
    op_kinds: Vec<(Var, String)>,
}

/// The op kind a typed variable names: `?Mul` and `?Mul_2` match only a Mul
/// (an uppercase first letter makes a variable typed; what follows an
/// underscore tells several of one kind apart).
fn op_kind(var: &Var) -> Option<String> {
    let name = var.to_string();
    let name = name.strip_prefix('?')?;
    name.starts_with(|c: char| c.is_ascii_uppercase())
        .then(|| name.split('_').next().unwrap_or(name).to_string())
}

/// Whether every typed variable of `kinds` is bound to an op of its kind.
fn kinds_match(eg: &LEGraph, kinds: &[(Var, String)], subst: &Subst) -> bool {
    kinds.iter().all(|(var, kind)| {
        subst
            .get(*var)
            .is_some_and(|&id| entry_of(eg, id).is_ok_and(|e| e.op.kind_name() == kind))
    })
}

/// The classes a pattern's nodes matched, under `subst`, and the nodes (its
/// root's last).
fn matched_classes(eg: &LEGraph, pat: &PatternAst<Lang>, subst: &Subst) -> (Vec<Id>, Vec<Lang>) {
    let mut ids: Vec<Option<Id>> = Vec::with_capacity(pat.as_ref().len());
    let mut out = Vec::new();
    let mut nodes = Vec::new();
    for n in pat.as_ref() {
        let id = match n {
            ENodeOrVar::Var(v) => subst.get(*v).copied(),
            ENodeOrVar::ENode(e) => {
                let mut ok = true;
                let node = e.clone().map_children(|c| {
                    ids[usize::from(c)].unwrap_or_else(|| {
                        ok = false;
                        c
                    })
                });
                let found = if ok { eg.lookup(node.clone()) } else { None };
                if found.is_some() && !matches!(e, Lang::Atom(_)) {
                    nodes.push(node);
                }
                // A graph input or constant is not built by the rewrite: its
                // class lends no spans (else every op would name the inputs).
                let is_source = |id: Id| {
                    eg[id]
                        .nodes
                        .iter()
                        .any(|n| matches!(n, Lang::Atom(Atom::Source(_))))
                };
                if let Some(id) = found {
                    if !matches!(e, Lang::Atom(_)) && !is_source(id) {
                        out.push(id);
                    }
                }
                found
            }
        };
        ids.push(id);
    }
    (out, nodes)
}

impl Applier<Lang, LayoutAnalysis> for RuleApplier {
    fn apply_one(
        &self,
        eg: &mut LEGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<Lang>>,
        rule_name: Symbol,
    ) -> Vec<Id> {
        if !kinds_match(eg, &self.op_kinds, subst) {
            return vec![];
        }
        let mut subst = subst.clone();
        for c in &self.conditions {
            match (c.check)(eg, &mut subst) {
                Ok(()) => {}
                Err(Refusal::NoMatch) => return vec![],
                Err(Refusal::Failed(message)) => {
                    // Kept for the rewrite report; the match itself is dropped.
                    eg.analysis.failures.push(format!(
                        "rule '{rule_name}', condition '{}': {message}",
                        c.name
                    ));
                    return vec![];
                }
            }
        }
        let (classes, lhs) = matched_classes(eg, &self.lhs, &subst);
        let spans = merge_spans(classes.iter().map(|&c| eg[c].data.spans.as_slice()));
        let name = eg[eclass].data.name.clone();
        let mut ids: Vec<Id> = Vec::with_capacity(self.rhs.as_ref().len());
        for n in self.rhs.as_ref() {
            let id = match n {
                ENodeOrVar::Var(v) => subst[*v],
                ENodeOrVar::ENode(e) => {
                    let node = e.clone().map_children(|c| ids[usize::from(c)]);
                    let existed = eg.lookup(node.clone()).is_some();
                    let id = eg.add(node);
                    if !existed && !matches!(e, Lang::Atom(_)) {
                        let data = &mut eg[id].data;
                        data.spans = spans.clone();
                        data.name = name.clone();
                    }
                    id
                }
            };
            ids.push(id);
        }
        let root = *ids.last().expect("a pattern has a root");
        let rhs = match self.rhs.as_ref().last() {
            Some(ENodeOrVar::ENode(e)) => Some(e.clone().map_children(|c| ids[usize::from(c)])),
            _ => None,
        };
        // A condition that let an ill-typed right side through is a bug in
        // it; never let such a node join a class the extractor may pick from.
        if let super::egraph::Info::Invalid(_) = eg[root].data.info {
            return vec![];
        }
        let changed = eg.union(eclass, root);
        // The class that stands for the matched term now stands for every
        // source layer the match covered (a cancelled pair leaves its spans
        // on the value that replaces it).
        let merged = eg.find(eclass);
        let data = &mut eg[merged].data;
        if spans.iter().any(|s| !data.spans.contains(s)) {
            data.spans = merge_spans([data.spans.as_slice(), spans.as_slice()]);
        }
        if changed {
            eg.analysis.firings.push(Firing {
                rule: rule_name.to_string(),
                class: eclass,
                lhs,
                rhs,
                spans,
            });
            vec![eclass]
        } else {
            vec![]
        }
    }

    fn vars(&self) -> Vec<Var> {
        self.needs.clone()
    }
}

fn pattern_vars(p: &PatternAst<Lang>) -> Vec<Var> {
    let mut vs: Vec<Var> = p
        .as_ref()
        .iter()
        .filter_map(|n| match n {
            ENodeOrVar::Var(v) => Some(*v),
            _ => None,
        })
        .collect();
    vs.sort();
    vs.dedup();
    vs
}

/// Splits `text` at `sep` outside parentheses (first occurrence).
fn split_top(text: &str, sep: &str) -> Option<(String, String)> {
    let mut depth = 0i32;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 && text[i..].starts_with(sep) => {
                return Some((text[..i].to_string(), text[i + sep.len()..].to_string()))
            }
            _ => {}
        }
    }
    None
}

/// Whether `c` may stand in the name of a rule or a definition.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Whether `name` can name a rule or a definition.
fn is_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(is_name_char)
}

/// `line` with every `$name` replaced by the pattern defined for it; the
/// first name without a definition is the error.
fn expand<'a>(line: &'a str, definitions: &HashMap<String, String>) -> Result<String, &'a str> {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let end = after
            .find(|c: char| !is_name_char(c))
            .unwrap_or(after.len());
        let name = &after[..end];
        let pattern = definitions.get(name).ok_or(name)?;
        out.push_str(pattern);
        rest = &after[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Parses the rules of one file's text; `file` names it in errors. A line
/// `stage: graph`, `stage: layout` or `stage: graph, layout` before the first
/// rule says when the file's rules rewrite; `layout` when there is none. A
/// line `$name = (pattern)` defines a pattern that later lines of the file
/// write as `$name` (a subterm that a spelling repeats).
pub fn parse_rules(text: &str, file: &str) -> Result<RuleSet, RuleError> {
    let mut rules = Vec::new();
    let mut stages = vec![Stage::Layout];
    let mut definitions = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let err = |message: String| RuleError::Syntax {
            file: file.to_string(),
            line: i + 1,
            message,
        };
        let undefined = |name: &str| {
            err(format!(
                "'${name}' is not defined (define it first: '${name} = (pattern)')"
            ))
        };
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        if let Some(definition) = line.strip_prefix('$') {
            let (name, pattern) = definition
                .split_once('=')
                .ok_or_else(|| err("expected '$name = (pattern)'".into()))?;
            let name = name.trim();
            if !is_name(name) {
                return Err(err(format!(
                    "'{name}' is not a definition's name (letters, digits, '-', '_')"
                )));
            }
            // Expanded now, so that a later definition may use this one.
            let pattern = expand(pattern.trim(), &definitions).map_err(undefined)?;
            pattern
                .parse::<Pattern<Lang>>()
                .map_err(|e| err(format!("bad pattern for '${name}': {e}")))?;
            definitions.insert(name.to_string(), pattern);
            continue;
        }
        let line = expand(line, &definitions).map_err(undefined)?;
        let (name, body) = line
            .split_once(':')
            .ok_or_else(|| err("expected 'name: (lhs) => (rhs) [if cond, ...]'".into()))?;
        let name = name.trim();
        if name == "stage" && !body.contains("=>") {
            if !rules.is_empty() {
                return Err(err("'stage:' must come before the file's first rule".into()));
            }
            stages = body
                .split(',')
                .map(|t| match t.trim() {
                    "graph" => Ok(Stage::Graph),
                    "layout" => Ok(Stage::Layout),
                    other => Err(err(format!(
                        "unknown stage '{other}' (expected graph or layout)"
                    ))),
                })
                .collect::<Result<_, _>>()?;
            continue;
        }
        if !is_name(name) {
            return Err(err(format!(
                "'{name}' is not a rule name (letters, digits, '-', '_')"
            )));
        }
        let (lhs, rest) = split_top(body, "=>").ok_or_else(|| err("missing '=>'".into()))?;
        let (rhs, conds) = match split_top(&rest, " if ") {
            Some((r, c)) => (r, Some(c)),
            None => (rest, None),
        };
        let parse = |side: &str, what: &str| -> Result<Pattern<Lang>, RuleError> {
            side.trim()
                .parse::<Pattern<Lang>>()
                .map_err(|e| err(format!("bad {what} '{}': {e}", side.trim())))
        };
        let (lhs, rhs) = (parse(&lhs, "left side")?, parse(&rhs, "right side")?);
        let mut conditions = Vec::new();
        for c in conds.iter().flat_map(|c| c.split(',')) {
            let c = c.trim();
            let cond = CONDITIONS.iter().find(|k| k.name == c).ok_or_else(|| {
                let known: Vec<&str> = CONDITIONS.iter().map(|k| k.name).collect();
                err(format!(
                    "unknown condition '{c}' (known: {})",
                    known.join(", ")
                ))
            })?;
            conditions.push(cond);
        }
        // Every variable must be bound before it is read.
        let mut bound = pattern_vars(&lhs.ast);
        for c in &conditions {
            for r in c.reads {
                if !bound.contains(&v(r)) {
                    return Err(err(format!(
                        "condition '{}' reads {r}, which the left side does not bind",
                        c.name
                    )));
                }
            }
            bound.extend(c.binds.iter().map(|b| v(b)));
        }
        if let Some(free) = pattern_vars(&rhs.ast)
            .into_iter()
            .find(|x| !bound.contains(x))
        {
            return Err(err(format!(
                "the right side uses {free}, which nothing binds"
            )));
        }
        let needs: Vec<Var> = pattern_vars(&lhs.ast);
        let op_kinds = (needs.iter())
            .filter_map(|var| op_kind(var).map(|kind| (*var, kind)))
            .collect();
        let applier = RuleApplier {
            lhs: lhs.ast.clone(),
            rhs: rhs.ast.clone(),
            conditions,
            needs,
            op_kinds,
        };
        rules.push((name.to_string(), lhs, applier, i + 1));
    }
    // A rewrite is built per stage (egg's rewrites are not `Clone`).
    let mut set = RuleSet::default();
    for stage in stages {
        for (name, lhs, applier, line) in &rules {
            let rw = Rewrite::new(name.clone(), lhs.clone(), applier.clone()).map_err(|m| {
                RuleError::Syntax {
                    file: file.to_string(),
                    line: *line,
                    message: m,
                }
            })?;
            set.stage_mut(stage).push(rw);
        }
    }
    Ok(set)
}

/// Loads every `*.rules` file of a directory, in name order.
pub fn load_rules(dir: &Path) -> Result<RuleSet, RuleError> {
    let io = |e: std::io::Error| RuleError::Io {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rules"))
        // A FIFO or device named *.rules would block or never end.
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let mut rules = RuleSet::default();
    for f in files {
        let text = std::fs::read_to_string(&f).map_err(|e| RuleError::Io {
            path: f.display().to_string(),
            message: e.to_string(),
        })?;
        rules.extend(parse_rules(&text, &f.display().to_string())?);
    }
    Ok(rules)
}

/// The rule files shipped in the binary (the `rules/` folder at build time), so
/// that a copied binary plans exactly as the one built here.
const BUNDLED: &[(&str, &str)] = &[
    (
        "activations.rules",
        include_str!("../../rules/activations.rules"),
    ),
    (
        "conv_affine.rules",
        include_str!("../../rules/conv_affine.rules"),
    ),
    ("movement.rules", include_str!("../../rules/movement.rules")),
    (
        "normalizations.rules",
        include_str!("../../rules/normalizations.rules"),
    ),
    (
        "structure.rules",
        include_str!("../../rules/structure.rules"),
    ),
    (
        "transforms.rules",
        include_str!("../../rules/transforms.rules"),
    ),
    (
        "transposes.rules",
        include_str!("../../rules/transposes.rules"),
    ),
    ("windows.rules", include_str!("../../rules/windows.rules")),
];

/// When a rule rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The op graph before layouts are chosen: the forms the planner expects
    /// (pads folded into windows, movement chains merged).
    Graph,
    /// The planned graph, whose layout transforms rules cancel and move.
    Layout,
}

/// Rules by the stage they rewrite in.
#[derive(Debug, Default)]
pub struct RuleSet {
    /// Rules of the op graph, before planning.
    pub graph: Vec<Rewrite<Lang, LayoutAnalysis>>,
    /// Rules of the planned graph.
    pub layout: Vec<Rewrite<Lang, LayoutAnalysis>>,
}

impl RuleSet {
    /// The rules of `stage`.
    pub fn stage(&self, stage: Stage) -> &[Rewrite<Lang, LayoutAnalysis>] {
        match stage {
            Stage::Graph => &self.graph,
            Stage::Layout => &self.layout,
        }
    }

    fn stage_mut(&mut self, stage: Stage) -> &mut Vec<Rewrite<Lang, LayoutAnalysis>> {
        match stage {
            Stage::Graph => &mut self.graph,
            Stage::Layout => &mut self.layout,
        }
    }

    /// Adds the rules of `other`, stage by stage.
    pub fn extend(&mut self, other: RuleSet) {
        self.graph.extend(other.graph);
        self.layout.extend(other.layout);
    }

    /// How many rules, over both stages.
    pub fn len(&self) -> usize {
        self.graph.len() + self.layout.len()
    }

    /// Whether there is no rule at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The environment variable naming a folder of `*.rules` files to use instead
/// of the bundled ones (`--rules` on the command line wins over it).
pub const RULES_ENV: &str = "LAYOUTOPT_RULES";

/// Where the rewrite rules come from.
#[derive(Clone, Debug, PartialEq)]
pub enum RuleSource {
    /// The rules built into the binary.
    Bundled,
    /// Every `*.rules` file of a folder.
    Dir(PathBuf),
}

impl RuleSource {
    /// The folder in `LAYOUTOPT_RULES` when set, else the bundled rules.
    pub fn from_env() -> RuleSource {
        match std::env::var_os(RULES_ENV) {
            Some(dir) if !dir.is_empty() => RuleSource::Dir(PathBuf::from(dir)),
            _ => RuleSource::Bundled,
        }
    }

    /// Parses the rules.
    pub fn load(&self) -> Result<RuleSet, RuleError> {
        match self {
            RuleSource::Bundled => {
                let mut rules = RuleSet::default();
                for (file, text) in BUNDLED {
                    rules.extend(parse_rules(text, &format!("rules/{file}"))?);
                }
                Ok(rules)
            }
            RuleSource::Dir(dir) => load_rules(dir),
        }
    }
}

impl std::fmt::Display for RuleSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RuleSource::Bundled => f.write_str("the bundled rules"),
            RuleSource::Dir(d) => write!(f, "the rules in {}", d.display()),
        }
    }
}

#[cfg(test)]
mod bundled_tests {
    use super::*;

    #[test]
    fn every_rules_file_of_the_folder_is_built_in() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("rules");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".rules"))
            .collect();
        on_disk.sort();
        let built_in: Vec<String> = BUNDLED.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(built_in, on_disk, "add new rule files to BUNDLED");
        let loaded = RuleSource::Bundled.load().unwrap();
        assert_eq!(loaded.len(), load_rules(&dir).unwrap().len());
        assert!(!loaded.is_empty());
    }

    /// rules/README.md documents every condition exactly as the code defines it.
    #[test]
    fn the_readme_table_of_conditions_is_the_code() {
        let readme =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/README.md"))
                .unwrap();
        let conditions = readme
            .split("## Conditions")
            .nth(1)
            .expect("rules/README.md has a Conditions section");
        let mut documented: Vec<(String, String, String)> = vec![];
        // | `name`, `name2` | reads | binds | holds when |
        for line in conditions.lines().filter(|l| l.starts_with("| `")) {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            assert!(cells.len() >= 5, "a short table row: {line}");
            for name in cells[1].split(',') {
                let name = name.trim().trim_matches('`').to_string();
                documented.push((name, cells[2].to_string(), cells[3].to_string()));
            }
        }
        let mut in_code: Vec<(String, String, String)> = CONDITIONS
            .iter()
            .map(|c| (c.name.to_string(), c.reads.join(" "), c.binds.join(" ")))
            .collect();
        documented.sort();
        in_code.sort();
        assert_eq!(documented, in_code);
    }
}
