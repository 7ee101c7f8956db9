//! The global assignment problem behind layout planning, and its solver.
//!
//! The planner states its choice as a pairwise discrete problem: every variable
//! (an op's implementation layout, or a tensor's storage layout) picks one of a few
//! choices; each choice has a unary cost (the op's cost in that layout), each pair of
//! connected variables a cost table (bytes a transform moves between them). The goal
//! is the assignment of least total cost, over the whole graph at once.
//!
//! Solving:
//! 1. A choice that another choice of its variable dominates (no dearer alone or
//!    against any choice of a neighbour) is dropped, as forbidden ones are.
//!    Variables with one choice left are fixed; their pair terms fold into their
//!    neighbours' unary costs. What stays falls apart into independent regions
//!    (connected components), each solved alone, over the choices left.
//! 2. A region whose interaction graph has small treewidth (chains, trees, the
//!    residual and branch structures of CNNs and transformers) is solved exactly by
//!    variable elimination in a min-fill order: the optimum, so its lower bound is
//!    the optimum itself.
//! 3. Any other region goes to the LP of the marginal (local-polytope) formulation in
//!    good_lp with the pure-Rust microlp backend: per pair a variable `y[a][b]` for each
//!    choice pair with `sum_b y[a][b] = x_i[a]` and `sum_a y[a][b] = x_j[b]`. An integral LP
//!    solution is optimal; otherwise the same model is solved with integer x under the
//!    time limit, and the LP value is reported as the lower bound.
//! 4. When the integer solve fails or runs out of time, the LP solution is rounded and
//!    improved by local search; the report says a fallback was used and states the gap.

use good_lp::{
    constraint, microlp, variable, Expression, ResolutionError, Solution as _, SolverModel,
    Variable, WithTimeLimit,
};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

/// A pairwise cost term between variables `a` and `b`:
/// `cost[ka * n_b + kb]` is paid when `a` takes `ka` and `b` takes `kb`.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// The first variable.
    pub a: usize,
    /// The second variable.
    pub b: usize,
    /// The cost of each pair of choices, row-major by `a`'s choice.
    pub cost: Vec<f64>,
}

/// The assignment problem. `f64::INFINITY` in a unary cost forbids that choice.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Problem {
    /// The cost of each choice of each variable.
    pub unary: Vec<Vec<f64>>,
    /// The pairwise terms.
    pub pairs: Vec<Pair>,
}

impl Problem {
    /// Total cost of an assignment (infinite when it picks a forbidden choice).
    pub fn cost(&self, choice: &[usize]) -> f64 {
        let u: f64 = self.unary.iter().zip(choice).map(|(c, &k)| c[k]).sum();
        let p: f64 = self
            .pairs
            .iter()
            .map(|p| p.cost[choice[p.a] * self.unary[p.b].len() + choice[p.b]])
            .sum();
        u + p
    }
}

/// Moves one variable at a time to its best choice given its neighbours, from
/// `start`, until no single move lowers the cost (a local optimum, no bound).
pub fn improve_locally(problem: &Problem, start: Vec<usize>) -> Vec<usize> {
    let region = Region {
        unary: problem.unary.clone(),
        pairs: problem
            .pairs
            .iter()
            .map(|p| (p.a, p.b, p.cost.clone()))
            .collect(),
    };
    region.local_search(start)
}

/// Limits for one solve.
#[derive(Clone, Debug)]
pub struct SolveOptions {
    /// Wall-clock budget for the integer solves of all regions together.
    pub time_limit: Duration,
    /// Largest factor table (entries) variable elimination may build before a region
    /// is handed to the LP instead.
    pub max_elimination_table: usize,
}

impl Default for SolveOptions {
    fn default() -> Self {
        SolveOptions {
            time_limit: Duration::from_secs(10),
            max_elimination_table: 1 << 16,
        }
    }
}

/// How one region was solved.
#[derive(Clone, Debug, PartialEq)]
pub enum Method {
    /// Exact variable elimination; `width` is the largest scope eliminated over.
    Elimination {
        /// The largest scope eliminated over.
        width: usize,
    },
    /// The marginal LP had an integral optimum.
    LpIntegral,
    /// The LP was fractional; the integer program found the optimum.
    Integer,
    /// The integer program failed or ran out of time: rounded LP plus local search.
    Fallback {
        /// Why the integer program was not used.
        reason: String,
    },
}

/// How one independent region of the problem was solved.
#[derive(Clone, Debug, PartialEq)]
pub struct RegionReport {
    /// Variables in the region.
    pub variables: usize,
    /// How it was solved.
    pub method: Method,
    /// The cost of the region's choice.
    pub objective: f64,
    /// A proved lower bound on the region's optimum.
    pub lower_bound: f64,
}

/// The chosen assignment with its cost, a lower bound on the optimum, and how
/// each region was solved.
#[derive(Clone, Debug, PartialEq)]
pub struct Solution {
    /// The choice of each variable.
    pub choice: Vec<usize>,
    /// Its total cost.
    pub objective: f64,
    /// A proved lower bound on the optimum.
    pub lower_bound: f64,
    /// How each region was solved.
    pub regions: Vec<RegionReport>,
    /// Variables fixed before solving (one choice or dominated).
    pub fixed_variables: usize,
}

impl Solution {
    /// Relative distance from the lower bound (0 when proven optimal).
    pub fn gap(&self) -> f64 {
        if self.objective <= self.lower_bound + 1e-9 * self.objective.abs().max(1.0) {
            0.0
        } else {
            (self.objective - self.lower_bound) / self.objective.abs().max(1e-12)
        }
    }

    /// Whether some region fell back to the heuristic.
    pub fn used_fallback(&self) -> bool {
        self.regions
            .iter()
            .any(|r| matches!(r.method, Method::Fallback { .. }))
    }
}

/// Why the assignment problem could not be solved.
#[derive(Debug, thiserror::Error)]
pub enum SolveError {
    /// The problem's tables do not fit together.
    #[error("layout problem is malformed: {0}")]
    Malformed(String),
    /// A variable has no allowed choice.
    #[error("no assignment avoids a forbidden choice (variable {0} has none allowed)")]
    Infeasible(usize),
}

/// Solves `problem` to optimality where possible within `opts`.
pub fn solve(problem: &Problem, opts: &SolveOptions) -> Result<Solution, SolveError> {
    validate(problem)?;
    let n = problem.unary.len();
    let mut unary = problem.unary.clone();
    // A dominated choice is forbidden like an infinite one.
    for (c, kept) in unary.iter_mut().zip(undominated(problem)) {
        for (k, cost) in c.iter_mut().enumerate() {
            if !kept.contains(&k) {
                *cost = f64::INFINITY;
            }
        }
    }
    let mut choice = vec![usize::MAX; n];
    let mut constant = 0.0;

    // Fix variables with a single allowed choice.
    for (i, c) in unary.iter().enumerate() {
        match allowed_choices(c).as_slice() {
            [] => return Err(SolveError::Infeasible(i)),
            [k] => choice[i] = *k,
            _ => {}
        }
    }
    let fixed_variables = choice.iter().filter(|&&k| k != usize::MAX).count();

    // Fold pair terms touching fixed variables; merge parallel pairs.
    let mut pairs: BTreeMap<(usize, usize), Vec<f64>> = BTreeMap::new();
    for p in &problem.pairs {
        let (na, nb) = (problem.unary[p.a].len(), problem.unary[p.b].len());
        match (choice[p.a] != usize::MAX, choice[p.b] != usize::MAX) {
            (true, true) => constant += p.cost[choice[p.a] * nb + choice[p.b]],
            (true, false) => {
                let row = &p.cost[choice[p.a] * nb..][..nb];
                for (u, c) in unary[p.b].iter_mut().zip(row) {
                    *u += c;
                }
            }
            (false, true) => {
                for (ka, u) in unary[p.a].iter_mut().enumerate() {
                    *u += p.cost[ka * nb + choice[p.b]];
                }
            }
            (false, false) if p.a == p.b => {
                for (k, u) in unary[p.a].iter_mut().enumerate() {
                    *u += p.cost[k * nb + k];
                }
            }
            (false, false) => {
                let (lo, hi, table) = if p.a < p.b {
                    (p.a, p.b, p.cost.clone())
                } else {
                    (p.b, p.a, transpose(&p.cost, na, nb))
                };
                let entry = pairs
                    .entry((lo, hi))
                    .or_insert_with(|| vec![0.0; table.len()]);
                for (e, t) in entry.iter_mut().zip(table) {
                    *e += t;
                }
            }
        }
    }
    for (i, c) in unary.iter().enumerate() {
        if choice[i] != usize::MAX {
            constant += c[choice[i]];
        }
    }

    let regions = components(n, &choice, &pairs);
    let deadline = Instant::now() + opts.time_limit;
    let mut reports = Vec::with_capacity(regions.len());
    let mut lower_bound = constant;
    for (region, sub) in Region::split(&regions, &unary, &pairs) {
        let (local, report) = sub.solve(opts, deadline)?;
        for (&v, k) in region.iter().zip(local) {
            choice[v] = k;
        }
        lower_bound += report.lower_bound;
        reports.push(report);
    }
    let objective = problem.cost(&choice);
    Ok(Solution {
        choice,
        objective,
        lower_bound: lower_bound.min(objective),
        regions: reports,
        fixed_variables,
    })
}

/// The choices of a variable whose cost alone is finite (not forbidden).
fn allowed_choices(unary: &[f64]) -> Vec<usize> {
    (0..unary.len()).filter(|&k| unary[k].is_finite()).collect()
}

/// Per variable, in order, the choices some optimum may need: the allowed
/// (finite) ones, less each that another choice of the same variable
/// dominates, being no dearer alone and no dearer against every choice left
/// to each neighbour. Moving a variable from a dominated choice to its
/// dominator never raises the cost, so an optimum keeps to the choices left;
/// of choices that cost the same everywhere the first stays. An e-graph's
/// extraction has hundreds of optional constants, each shared by many
/// operators, whose "unused" is dominated by a "used" that costs nothing:
/// they are fixed here, and what is left eliminates exactly where it would
/// have gone to the integer program (MobileNetV3Small: 551 free variables and
/// a 2^19-entry table; 223 and 72 entries without the dominated choices).
fn undominated(problem: &Problem) -> Vec<Vec<usize>> {
    let n = problem.unary.len();
    let mut kept: Vec<Vec<usize>> = problem.unary.iter().map(|c| allowed_choices(c)).collect();
    let mut incident: Vec<Vec<usize>> = vec![vec![]; n];
    for (i, p) in problem.pairs.iter().enumerate() {
        incident[p.a].push(i);
        if p.b != p.a {
            incident[p.b].push(i);
        }
    }
    // The other variable of pair `i` seen from `v`, and the pair's cost of
    // `v` taking `kv` against it taking `ko`.
    let other = |i: usize, v: usize| {
        let p = &problem.pairs[i];
        if p.a == v {
            p.b
        } else {
            p.a
        }
    };
    let cost = |i: usize, v: usize, kv: usize, ko: usize| {
        let p = &problem.pairs[i];
        let nb = problem.unary[p.b].len();
        match p.a == v {
            true => p.cost[kv * nb + ko],
            false => p.cost[ko * nb + kv],
        }
    };
    let dominates = |kept: &[Vec<usize>], v: usize, k: usize, j: usize| {
        problem.unary[v][k] <= problem.unary[v][j]
            && incident[v].iter().all(|&i| {
                let o = other(i, v);
                // A pair of a variable with itself compares diagonals: left as is.
                o != v
                    && kept[o]
                        .iter()
                        .all(|&ko| cost(i, v, k, ko) <= cost(i, v, j, ko))
            })
    };
    // A variable is looked at again when a neighbour loses a choice. Each
    // look costs its choices squared times its pair tables; a hub read by
    // thousands that a long chain of losses keeps sending back would cost
    // their product, so the looks stop at a budget linear in the problem
    // (dropping fewer choices is still exact).
    let tables: usize = problem.pairs.iter().map(|p| p.cost.len()).sum();
    let mut budget = 16 * (n + tables);
    let mut queue: VecDeque<usize> = (0..n).collect();
    let mut queued = vec![true; n];
    while let Some(v) = queue.pop_front() {
        queued[v] = false;
        let choices = &kept[v];
        let look: usize = (incident[v].iter())
            .map(|&i| kept[other(i, v)].len())
            .sum::<usize>()
            .saturating_mul(choices.len() * choices.len());
        budget = match budget.checked_sub(look) {
            Some(left) => left,
            None => break,
        };
        let left: Vec<usize> = (choices.iter().copied())
            .filter(|&j| {
                !choices.iter().any(|&k| {
                    k != j && dominates(&kept, v, k, j) && (k < j || !dominates(&kept, v, j, k))
                })
            })
            .collect();
        if left.len() < kept[v].len() {
            kept[v] = left;
            for &i in &incident[v] {
                let o = other(i, v);
                if !std::mem::replace(&mut queued[o], true) {
                    queue.push_back(o);
                }
            }
        }
    }
    kept
}

fn validate(p: &Problem) -> Result<(), SolveError> {
    for (i, c) in p.unary.iter().enumerate() {
        if c.is_empty() {
            return Err(SolveError::Malformed(format!(
                "variable {i} has no choices"
            )));
        }
        if c.iter().any(|x| x.is_nan() || *x == f64::NEG_INFINITY) {
            return Err(SolveError::Malformed(format!(
                "variable {i} has a NaN or -inf cost"
            )));
        }
    }
    for (k, pr) in p.pairs.iter().enumerate() {
        let n = p.unary.len();
        if pr.a >= n || pr.b >= n {
            return Err(SolveError::Malformed(format!(
                "pair {k} names a missing variable"
            )));
        }
        if pr.cost.len() != p.unary[pr.a].len() * p.unary[pr.b].len() {
            return Err(SolveError::Malformed(format!(
                "pair {k} has a table of the wrong size"
            )));
        }
        if pr.cost.iter().any(|x| !x.is_finite()) {
            return Err(SolveError::Malformed(format!(
                "pair {k} has a non-finite cost"
            )));
        }
    }
    Ok(())
}

fn transpose(t: &[f64], na: usize, nb: usize) -> Vec<f64> {
    let mut out = vec![0.0; t.len()];
    for a in 0..na {
        for b in 0..nb {
            out[b * na + a] = t[a * nb + b];
        }
    }
    out
}

/// Connected components of the free variables, each sorted.
fn components(
    n: usize,
    choice: &[usize],
    pairs: &BTreeMap<(usize, usize), Vec<f64>>,
) -> Vec<Vec<usize>> {
    let mut parent: Vec<usize> = (0..n).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for &(a, b) in pairs.keys() {
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb {
            parent[ra.max(rb)] = ra.min(rb);
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for v in (0..n).filter(|&v| choice[v] == usize::MAX) {
        let r = find(&mut parent, v);
        groups.entry(r).or_default().push(v);
    }
    groups.into_values().collect()
}

/// One independent region, renumbered 0..len.
struct Region {
    unary: Vec<Vec<f64>>,
    pairs: Vec<(usize, usize, Vec<f64>)>,
}

impl Region {
    /// Each of `regions` with its variables' unary terms and the pair terms
    /// between them, in one pass over the pairs (a pass per region is
    /// quadratic when there are many regions).
    fn split<'r>(
        regions: &'r [Vec<usize>],
        unary: &[Vec<f64>],
        pairs: &BTreeMap<(usize, usize), Vec<f64>>,
    ) -> Vec<(&'r [usize], Region)> {
        // Per variable: its region and its index there.
        let mut place: Vec<Option<(usize, usize)>> = vec![None; unary.len()];
        for (r, vars) in regions.iter().enumerate() {
            for (i, &v) in vars.iter().enumerate() {
                place[v] = Some((r, i));
            }
        }
        let mut out: Vec<(&[usize], Region)> = regions
            .iter()
            .map(|vars| {
                let region = Region {
                    unary: vars.iter().map(|&v| unary[v].clone()).collect(),
                    pairs: Vec::new(),
                };
                (vars.as_slice(), region)
            })
            .collect();
        for (&(a, b), t) in pairs {
            if let (Some((r, la)), Some((_, lb))) = (place[a], place[b]) {
                out[r].1.pairs.push((la, lb, t.clone()));
            }
        }
        out
    }

    fn cost(&self, choice: &[usize]) -> f64 {
        let u: f64 = self.unary.iter().zip(choice).map(|(c, &k)| c[k]).sum();
        let p: f64 = self
            .pairs
            .iter()
            .map(|(a, b, t)| t[choice[*a] * self.unary[*b].len() + choice[*b]])
            .sum();
        u + p
    }

    /// The region over its allowed choices only (a forbidden one, of
    /// infinite cost, dropped), with each variable's kept choices in the
    /// original numbering: elimination's tables and the LP shrink by every
    /// choice no optimum takes.
    fn allowed(&self) -> (Region, Vec<Vec<usize>>) {
        let kept: Vec<Vec<usize>> = self.unary.iter().map(|c| allowed_choices(c)).collect();
        let unary = (self.unary.iter().zip(&kept))
            .map(|(c, ks)| ks.iter().map(|&k| c[k]).collect())
            .collect();
        let pairs = (self.pairs.iter())
            .map(|(a, b, t)| {
                let nb = self.unary[*b].len();
                let table = (kept[*a].iter())
                    .flat_map(|&ka| kept[*b].iter().map(move |&kb| t[ka * nb + kb]))
                    .collect();
                (*a, *b, table)
            })
            .collect();
        (Region { unary, pairs }, kept)
    }

    /// The least-cost choice of every variable, over the allowed choices.
    fn solve(
        &self,
        opts: &SolveOptions,
        deadline: Instant,
    ) -> Result<(Vec<usize>, RegionReport), SolveError> {
        let (allowed, kept) = self.allowed();
        let (local, report) = allowed.solve_allowed(opts, deadline)?;
        let choice = local.iter().zip(&kept).map(|(&k, ks)| ks[k]).collect();
        Ok((choice, report))
    }

    /// `solve` of a region whose every choice is allowed.
    fn solve_allowed(
        &self,
        opts: &SolveOptions,
        deadline: Instant,
    ) -> Result<(Vec<usize>, RegionReport), SolveError> {
        let report = |method, objective: f64, lower_bound: f64| RegionReport {
            variables: self.unary.len(),
            method,
            objective,
            lower_bound,
        };
        if let Some((choice, width)) = self.eliminate(opts.max_elimination_table) {
            let obj = self.cost(&choice);
            if obj.is_infinite() {
                return Err(SolveError::Infeasible(0));
            }
            return Ok((
                choice.clone(),
                report(Method::Elimination { width }, obj, obj),
            ));
        }
        let lp = self.lp(false, deadline)?;
        if let Some(choice) = integral(&lp.x) {
            let obj = self.cost(&choice);
            return Ok((
                choice,
                report(Method::LpIntegral, obj, lp.objective.min(obj)),
            ));
        }
        match self.lp(true, deadline) {
            Ok(mip) => {
                let choice = integral(&mip.x).unwrap_or_else(|| round(&mip.x));
                let obj = self.cost(&choice);
                Ok((choice, report(Method::Integer, obj, lp.objective.min(obj))))
            }
            Err(e) => {
                let choice = self.local_search(round(&lp.x));
                let obj = self.cost(&choice);
                Ok((
                    choice,
                    report(
                        Method::Fallback {
                            reason: e.to_string(),
                        },
                        obj,
                        lp.objective.min(obj),
                    ),
                ))
            }
        }
    }

    /// Exact min-sum variable elimination in a greedy min-fill order. Returns
    /// `None` when a factor would exceed `max_table` entries.
    fn eliminate(&self, max_table: usize) -> Option<(Vec<usize>, usize)> {
        let n = self.unary.len();
        let dom: Vec<usize> = self.unary.iter().map(Vec::len).collect();
        let mut factors: Vec<Option<Factor>> = Vec::new();
        let mut touching: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        let add =
            |f: Factor, factors: &mut Vec<Option<Factor>>, touching: &mut Vec<BTreeSet<usize>>| {
                for &v in &f.scope {
                    touching[v].insert(factors.len());
                }
                factors.push(Some(f));
            };
        for (v, c) in self.unary.iter().enumerate() {
            add(
                Factor {
                    scope: vec![v],
                    table: c.clone(),
                },
                &mut factors,
                &mut touching,
            );
        }
        for (a, b, t) in &self.pairs {
            add(
                Factor {
                    scope: vec![*a, *b],
                    table: t.clone(),
                },
                &mut factors,
                &mut touching,
            );
        }
        let mut neighbours: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); n];
        for (a, b, _) in &self.pairs {
            neighbours[*a].insert(*b);
            neighbours[*b].insert(*a);
        }
        // The order key of v is the log of the factor eliminating v would
        // create, in fixed point so that it is kept up to date exactly as
        // neighbours come and go: recomputing a product over all of a hub's
        // neighbours whenever one of them changed made elimination quadratic.
        let log_dom: Vec<u64> = dom
            .iter()
            .map(|&d| ((d.max(1) as f64).log2() * LOG_UNITS) as u64)
            .collect();
        let mut key: Vec<u64> = neighbours
            .iter()
            .map(|nb| nb.iter().map(|&u| log_dom[u]).sum())
            .collect();
        // Lazy min-heap on the key.
        let mut heap: BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
            (0..n).map(|v| std::cmp::Reverse((key[v], v))).collect();
        let mut eliminated = vec![false; n];
        let mut steps: Vec<(usize, Vec<usize>, Vec<usize>)> = Vec::with_capacity(n); // (var, scope, argmin)
        let mut width = 0;
        while let Some(std::cmp::Reverse((k, v))) = heap.pop() {
            if eliminated[v] || k != key[v] {
                continue;
            }
            let size = neighbours[v]
                .iter()
                .fold(1usize, |acc, &u| acc.saturating_mul(dom[u]));
            if size.saturating_mul(dom[v]) > max_table {
                return None;
            }
            eliminated[v] = true;
            let scope: Vec<usize> = neighbours[v].iter().copied().collect();
            width = width.max(scope.len());
            let ids: Vec<usize> = std::mem::take(&mut touching[v]).into_iter().collect();
            let parts: Vec<Factor> = ids.iter().filter_map(|&i| factors[i].take()).collect();
            for &i in &ids {
                for &u in &scope {
                    touching[u].remove(&i);
                }
            }
            let (table, argmin) = min_out(v, &scope, &parts, &dom);
            steps.push((v, scope.clone(), argmin));
            add(
                Factor {
                    scope: scope.clone(),
                    table,
                },
                &mut factors,
                &mut touching,
            );
            for &u in &scope {
                if neighbours[u].remove(&v) {
                    key[u] -= log_dom[v];
                }
                for &w in &scope {
                    if w != u && neighbours[u].insert(w) {
                        key[u] += log_dom[w];
                    }
                }
                heap.push(std::cmp::Reverse((key[u], u)));
            }
        }
        // Back-substitute in reverse elimination order.
        let mut choice = vec![0usize; n];
        for (v, scope, argmin) in steps.iter().rev() {
            let idx = scope.iter().fold(0, |acc, &u| acc * dom[u] + choice[u]);
            choice[*v] = argmin[idx];
        }
        Some((choice, width))
    }

    /// The marginal LP (or, with `integer`, the integer program).
    fn lp(&self, integer: bool, deadline: Instant) -> Result<LpResult, SolveError> {
        let mut vars = good_lp::ProblemVariables::new();
        let x: Vec<Vec<Variable>> = self
            .unary
            .iter()
            .map(|c| {
                c.iter()
                    .map(|cost| {
                        // A forbidden choice is pinned to zero.
                        let ub = if cost.is_finite() { 1.0 } else { 0.0 };
                        let def = variable().min(0.0).max(ub);
                        vars.add(if integer { def.integer() } else { def })
                    })
                    .collect()
            })
            .collect();
        let y: Vec<Vec<Variable>> = self
            .pairs
            .iter()
            .map(|(_, _, t)| t.iter().map(|_| vars.add(variable().min(0.0))).collect())
            .collect();
        let mut objective = Expression::from(0.0);
        for (xs, c) in x.iter().zip(&self.unary) {
            for (&xv, &cost) in xs.iter().zip(c) {
                if cost.is_finite() {
                    objective += cost * xv;
                }
            }
        }
        for (ys, (_, _, t)) in y.iter().zip(&self.pairs) {
            for (&yv, &cost) in ys.iter().zip(t) {
                objective += cost * yv;
            }
        }
        let mut model = vars.minimise(objective.clone()).using(microlp);
        let remaining = deadline.saturating_duration_since(Instant::now());
        if integer {
            if remaining.is_zero() {
                return Err(SolveError::Malformed(
                    "time limit reached before the integer solve".into(),
                ));
            }
            model = model.with_time_limit(remaining.as_secs_f64());
        }
        for xs in &x {
            let sum: Expression = xs.iter().copied().sum();
            model = model.with(constraint!(sum == 1.0));
        }
        for (ys, (a, b, _)) in y.iter().zip(&self.pairs) {
            let (na, nb) = (self.unary[*a].len(), self.unary[*b].len());
            for ka in 0..na {
                let row: Expression = (0..nb).map(|kb| ys[ka * nb + kb]).sum();
                model = model.with(constraint!(row == x[*a][ka]));
            }
            for kb in 0..nb {
                let col: Expression = (0..na).map(|ka| ys[ka * nb + kb]).sum();
                model = model.with(constraint!(col == x[*b][kb]));
            }
        }
        let sol = model.solve().map_err(|e: ResolutionError| {
            SolveError::Malformed(format!("the LP solver failed: {e}"))
        })?;
        Ok(LpResult {
            x: x.iter()
                .map(|xs| xs.iter().map(|&v| sol.value(v)).collect())
                .collect(),
            objective: sol.eval(&objective),
        })
    }

    /// Iterated conditional modes: move one variable at a time to its best choice
    /// given its neighbours, until no move helps.
    fn local_search(&self, mut choice: Vec<usize>) -> Vec<usize> {
        let mut touching: Vec<Vec<usize>> = vec![Vec::new(); self.unary.len()];
        for (i, (a, b, _)) in self.pairs.iter().enumerate() {
            touching[*a].push(i);
            touching[*b].push(i);
        }
        let local = |v: usize, choice: &[usize]| -> f64 {
            let pairs: f64 = touching[v]
                .iter()
                .map(|&i| {
                    let (a, b, t) = &self.pairs[i];
                    t[choice[*a] * self.unary[*b].len() + choice[*b]]
                })
                .sum();
            self.unary[v][choice[v]] + pairs
        };
        let mut improved = true;
        while improved {
            improved = false;
            for v in 0..choice.len() {
                let (mut best_k, mut best) = (choice[v], local(v, &choice));
                for k in 0..self.unary[v].len() {
                    choice[v] = k;
                    let c = local(v, &choice);
                    if c + 1e-9 < best {
                        (best_k, best) = (k, c);
                        improved = true;
                    }
                }
                choice[v] = best_k;
            }
        }
        choice
    }
}

struct LpResult {
    x: Vec<Vec<f64>>,
    objective: f64,
}

fn integral(x: &[Vec<f64>]) -> Option<Vec<usize>> {
    x.iter()
        .map(|xs| xs.iter().position(|&v| (v - 1.0).abs() < 1e-6))
        .collect()
}

fn round(x: &[Vec<f64>]) -> Vec<usize> {
    x.iter()
        .map(|xs| {
            (0..xs.len())
                .max_by(|&a, &b| xs[a].total_cmp(&xs[b]))
                .unwrap_or(0)
        })
        .collect()
}

/// Fixed-point units per bit of the elimination order key.
const LOG_UNITS: f64 = (1u64 << 20) as f64;

/// A cost table over `scope` (row-major in scope order).
struct Factor {
    scope: Vec<usize>,
    table: Vec<f64>,
}

/// Sums `parts` and minimises out `v`: the new table over `scope` and, for each of
/// its entries, the best choice of `v`.
fn min_out(v: usize, scope: &[usize], parts: &[Factor], dom: &[usize]) -> (Vec<f64>, Vec<usize>) {
    let size: usize = scope.iter().map(|&u| dom[u]).product();
    let mut table = vec![f64::INFINITY; size];
    let mut argmin = vec![0usize; size];
    // A part's entry is at the sum over its variables of choice times
    // stride: per part, the stride of each scope position (0 where the part
    // does not read it), then of `v`. The scope's choices then step as an
    // odometer that moves each part's base entry, with no division per
    // entry (decoding each entry's choices took most of an elimination).
    let n = scope.len();
    let local = |u: usize| scope.iter().position(|&s| s == u).unwrap_or(n);
    let strides: Vec<Vec<usize>> = parts
        .iter()
        .map(|f| {
            let mut s = vec![0usize; n + 1];
            let mut stride = 1;
            for &u in f.scope.iter().rev() {
                s[local(u)] += stride;
                stride *= dom[u];
            }
            s
        })
        .collect();
    let mut base = vec![0usize; parts.len()];
    let mut assign = vec![0usize; n];
    for idx in 0..size {
        for kv in 0..dom[v] {
            let total: f64 = (parts.iter().zip(&strides).zip(&base))
                .map(|((f, s), &b)| f.table[b + kv * s[n]])
                .sum();
            if total < table[idx] {
                table[idx] = total;
                argmin[idx] = kv;
            }
        }
        // The next entry: the last scope variable fastest.
        for k in (0..n).rev() {
            assign[k] += 1;
            if assign[k] < dom[scope[k]] {
                base.iter_mut().zip(&strides).for_each(|(b, s)| *b += s[k]);
                break;
            }
            let back = dom[scope[k]] - 1;
            base.iter_mut()
                .zip(&strides)
                .for_each(|(b, s)| *b -= back * s[k]);
            assign[k] = 0;
        }
    }
    (table, argmin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute_force(p: &Problem) -> f64 {
        let n = p.unary.len();
        let mut choice = vec![0; n];
        let mut best = f64::INFINITY;
        loop {
            best = best.min(p.cost(&choice));
            let mut i = 0;
            loop {
                if i == n {
                    return best;
                }
                choice[i] += 1;
                if choice[i] < p.unary[i].len() {
                    break;
                }
                choice[i] = 0;
                i += 1;
            }
        }
    }

    /// Options that send every region to the linear (and integer) program.
    fn lp_only() -> SolveOptions {
        SolveOptions {
            max_elimination_table: 0,
            ..SolveOptions::default()
        }
    }

    fn problem_strategy() -> impl Strategy<Value = Problem> {
        (2usize..7).prop_flat_map(|n| {
            let doms = proptest::collection::vec(1usize..4, n);
            doms.prop_flat_map(move |doms| {
                let unary = doms
                    .iter()
                    .map(|&d| proptest::collection::vec(0.0f64..10.0, d))
                    .collect::<Vec<_>>();
                let pairs =
                    proptest::collection::vec((0..n, 0..n, 0.0f64..10.0, 0u64..1000), 0..10);
                let doms2 = doms.clone();
                (unary, pairs).prop_map(move |(unary, pairs)| Problem {
                    unary,
                    pairs: pairs
                        .into_iter()
                        .map(|(a, b, scale, seed)| {
                            let len = doms2[a] * doms2[b];
                            let cost = (0..len)
                                .map(|k| {
                                    scale * (((seed + 7 * k as u64) * 2654435761) % 97) as f64
                                        / 97.0
                                })
                                .collect();
                            Pair { a, b, cost }
                        })
                        .collect(),
                })
            })
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Elimination, the LP path and brute force agree on the optimum, and the
        /// lower bound never exceeds it.
        #[test]
        fn solver_finds_the_brute_force_optimum(p in problem_strategy()) {
            let best = brute_force(&p);
            let exact = solve(&p, &SolveOptions::default()).unwrap();
            prop_assert!((exact.objective - best).abs() < 1e-6, "elimination {} vs {}", exact.objective, best);
            prop_assert!(exact.lower_bound <= best + 1e-6);
            let via_lp = solve(&p, &lp_only()).unwrap();
            prop_assert!((via_lp.objective - best).abs() < 1e-6, "lp path {} vs {}", via_lp.objective, best);
            prop_assert!(via_lp.lower_bound <= best + 1e-6);
        }
    }

    #[test]
    fn fixed_variables_split_the_problem_into_regions() {
        // a - F - b, with F fixed: a and b are independent regions.
        let p = Problem {
            unary: vec![vec![0.0, 1.0], vec![5.0], vec![1.0, 0.0]],
            pairs: vec![
                Pair {
                    a: 0,
                    b: 1,
                    cost: vec![3.0, 0.0],
                },
                Pair {
                    a: 1,
                    b: 2,
                    cost: vec![0.0, 3.0],
                },
            ],
        };
        let s = solve(&p, &SolveOptions::default()).unwrap();
        assert_eq!(s.choice, vec![1, 0, 0]);
        assert_eq!(s.objective, 1.0 + 5.0 + 1.0);
        assert_eq!(s.regions.len(), 2);
        assert_eq!(s.fixed_variables, 1);
        assert_eq!(s.gap(), 0.0);
    }

    #[test]
    fn forbidden_choices_are_never_picked() {
        let p = Problem {
            unary: vec![vec![f64::INFINITY, 100.0], vec![0.0, 0.0]],
            pairs: vec![Pair {
                a: 0,
                b: 1,
                cost: vec![0.0, 0.0, 50.0, 0.0],
            }],
        };
        let s = solve(&p, &SolveOptions::default()).unwrap();
        assert_eq!(s.choice, vec![1, 1]);
        let lp = solve(&p, &lp_only()).unwrap();
        assert_eq!(lp.choice, vec![1, 1]);
    }

    #[test]
    fn a_frustrated_cycle_needs_the_integer_program() {
        // Three variables that all want to differ pairwise with two choices each:
        // the local polytope is fractional (x = 1/2 everywhere, cost 0); the integer
        // optimum must make one pair equal (cost 1).
        let differ = vec![1.0, 0.0, 0.0, 1.0];
        let p = Problem {
            unary: vec![vec![0.0, 0.0]; 3],
            pairs: vec![
                Pair {
                    a: 0,
                    b: 1,
                    cost: differ.clone(),
                },
                Pair {
                    a: 1,
                    b: 2,
                    cost: differ.clone(),
                },
                Pair {
                    a: 0,
                    b: 2,
                    cost: differ,
                },
            ],
        };
        let s = solve(&p, &lp_only()).unwrap();
        assert_eq!(s.objective, 1.0);
        assert_eq!(s.regions[0].method, Method::Integer);
        assert!(s.lower_bound < 1e-9, "LP bound {}", s.lower_bound);
        let exact = solve(&p, &SolveOptions::default()).unwrap();
        assert_eq!(exact.objective, 1.0);
        assert_eq!(exact.gap(), 0.0);
    }

    #[test]
    fn dominated_choices_are_dropped_before_elimination() {
        // Four constants that each of twelve chained operators reads, as in
        // an e-graph's extraction: an unused constant costs nothing but
        // forbids its readers, so "used" dominates it. Kept, the constants
        // would join every operator into one region too wide for the table.
        let (consts, ops) = (4, 12);
        let forbidden = 1000.0;
        let mut unary = vec![vec![0.0, 0.0]; consts];
        unary.extend((0..ops).map(|i| vec![1.0 + (i % 3) as f64, 2.0]));
        let mut pairs = vec![];
        for o in consts..consts + ops {
            for c in 0..consts {
                pairs.push(Pair {
                    a: o,
                    b: c,
                    cost: vec![0.0, 0.0, forbidden, 0.0],
                });
            }
            if o + 1 < consts + ops {
                pairs.push(Pair {
                    a: o,
                    b: o + 1,
                    cost: vec![0.0, 3.0, 3.0, 0.0],
                });
            }
        }
        let p = Problem { unary, pairs };
        let opts = SolveOptions {
            max_elimination_table: 64,
            ..SolveOptions::default()
        };
        let s = solve(&p, &opts).unwrap();
        assert_eq!(s.fixed_variables, consts);
        assert!(
            (s.regions.iter()).all(|r| matches!(r.method, Method::Elimination { .. })),
            "{:?}",
            s.regions
        );
        assert!((s.objective - brute_force(&p)).abs() < 1e-9);
        assert_eq!(s.gap(), 0.0);
    }

    #[test]
    fn malformed_problems_are_errors() {
        let p = Problem {
            unary: vec![vec![]],
            pairs: vec![],
        };
        assert!(matches!(
            solve(&p, &SolveOptions::default()),
            Err(SolveError::Malformed(_))
        ));
        let p = Problem {
            unary: vec![vec![0.0], vec![0.0]],
            pairs: vec![Pair {
                a: 0,
                b: 5,
                cost: vec![0.0],
            }],
        };
        assert!(solve(&p, &SolveOptions::default()).is_err());
        let p = Problem {
            unary: vec![vec![f64::INFINITY]],
            pairs: vec![],
        };
        assert!(matches!(
            solve(&p, &SolveOptions::default()),
            Err(SolveError::Infeasible(0))
        ));
    }

    #[test]
    fn long_residual_chain_is_solved_exactly_by_elimination() {
        // 3,000 variables in a chain with skip connections every 2 (a residual DAG).
        let n = 3000;
        let mut pairs = Vec::new();
        for i in 0..n - 1 {
            pairs.push(Pair {
                a: i,
                b: i + 1,
                cost: vec![0.0, 2.0, 2.0, 0.0],
            });
            if i + 2 < n && i % 2 == 0 {
                pairs.push(Pair {
                    a: i,
                    b: i + 2,
                    cost: vec![0.0, 1.0, 1.0, 0.0],
                });
            }
        }
        let unary = (0..n)
            .map(|i| {
                if i % 7 == 0 {
                    vec![0.0, 1.0]
                } else {
                    vec![0.5, 0.0]
                }
            })
            .collect();
        let p = Problem { unary, pairs };
        let s = solve(&p, &SolveOptions::default()).unwrap();
        assert!(matches!(s.regions[0].method, Method::Elimination { width } if width <= 3));
        // Staying in choice 1 everywhere costs 1 per seventh variable: no switch pays off.
        let all_one = p.cost(&vec![1; n]);
        assert!(s.objective <= all_one);
        assert_eq!(s.gap(), 0.0);
    }
}
