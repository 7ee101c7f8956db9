//! The layout algebra: how a logical (row-major) tensor is laid out in memory.
//!
//! A layout splits every logical axis into digits of a mixed radix: an outer digit
//! whose extent follows from the axis extent, then zero or more block factors
//! (outer to inner). The physical axes are a permutation of all digits. An axis
//! whose extent is not a multiple of the product of its factors is padded up to
//! one; the padding positions hold no logical element.
//!
//! Names follow the usual convention: an upper-case letter is an axis (its outer
//! digit), a number and a lower-case letter is a block of that axis: "NCHW16c",
//! "OIHW8i16o". The logical order of the letters is ONNX's (see `canonical_rank`),
//! so "NHWC" is the permutation [0, 2, 3, 1] of a logical NCHW tensor. Letters
//! name the row-major and channels-last orders of the axes (with any blocks:
//! "NCHW16c", "NHWC8c"); any other layout prints in the permutation form, the
//! logical axis of each physical axis, outermost first, with its blocks:
//! "(0,3,1,2,16@3)" (a transpose's output keeps its input's bytes, so a logical
//! NHWC tensor stored as NCHW16c is that). A layout whose own letters would
//! read back as another (a transpose carries its input's letters along) prints
//! with the default letters of its rank. Every name parses back to its layout,
//! so two different layouts never print the same.

use super::tensor::{next_index, numel, strides, Tensor, TensorData};
use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// An error of the layout algebra: a layout that is malformed, does not fit a
/// shape, or does not compose with another.
#[derive(Debug, thiserror::Error)]
pub enum AlgebraError {
    /// A layout's text (`text`) does not parse.
    #[error("layout '{text}': {message}")]
    #[allow(missing_docs)]
    Parse { text: String, message: String },
    /// A layout whose rank does not match the shape.
    #[error("layout {layout} does not fit shape {shape:?}")]
    #[allow(missing_docs)]
    Rank { layout: String, shape: Vec<usize> },
    /// `first` followed by `then` is no layout.
    #[error("layout {first} then {then} is not a layout: {why}")]
    #[allow(missing_docs)]
    NotComposable {
        first: String,
        then: String,
        why: String,
    },
    /// A layout that cannot exist (a bad permutation or block).
    #[error("{0}")]
    Invalid(String),
}

/// One physical axis: a digit of a logical axis (level 0 is the outer digit,
/// level k the k-th block factor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digit {
    /// The logical axis.
    pub axis: usize,
    /// 0 for the outer digit, k for the k-th block factor.
    pub level: usize,
}

/// A layout of a tensor of fixed rank. Equality ignores the axis letters, which
/// only serve printing: "NCHW" and "OIHW" are the same (identity) layout.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Upper-case letter of each logical axis (for printing).
    names: Vec<char>,
    /// Block factors of each logical axis, outer to inner.
    factors: Vec<Vec<usize>>,
    /// The physical axes, outermost first.
    order: Vec<Digit>,
}

/// Where a letter goes in the logical order: ONNX data (N C D H W) and weight
/// (O I D H W) axis orders, then any other letter alphabetically.
fn canonical_rank(c: char) -> (usize, char) {
    const ORDER: &str = "NCOIDHW";
    match ORDER.find(c) {
        Some(i) => (i, c),
        None => (ORDER.len(), c),
    }
}

/// Default letters of a rank: "NC", "NCW", "NCHW", "NCDHW", then more letters in
/// canonical order so that printing and parsing round-trip.
fn default_names(rank: usize) -> Result<Vec<char>, AlgebraError> {
    let base: &[char] = match rank {
        0 => &[],
        1 => &['N'],
        2 => &['N', 'C'],
        3 => &['N', 'C', 'W'],
        4 => &['N', 'C', 'H', 'W'],
        _ => &['N', 'C', 'D', 'H', 'W'],
    };
    let mut names = base.to_vec();
    let extra = ('A'..='Z').filter(|c| !"NCOIDHW".contains(*c));
    names.extend(extra.take(rank - names.len()));
    if names.len() != rank {
        return Err(AlgebraError::Invalid(format!(
            "rank {rank} has more axes than letters"
        )));
    }
    Ok(names)
}

impl Layout {
    /// Builds a layout from its parts, checking that every digit appears exactly
    /// once and that the blocks of each axis appear outer to inner (which the
    /// naming convention needs).
    pub fn new(
        names: Vec<char>,
        factors: Vec<Vec<usize>>,
        order: Vec<Digit>,
    ) -> Result<Layout, AlgebraError> {
        let rank = factors.len();
        if names.len() != rank {
            return Err(AlgebraError::Invalid(format!(
                "{} axis letters for rank {rank}",
                names.len()
            )));
        }
        if factors.iter().flatten().any(|&f| f == 0) {
            return Err(AlgebraError::Invalid("a block factor is 0".into()));
        }
        let expected: usize = factors.iter().map(|f| f.len() + 1).sum();
        let mut sorted = order.clone();
        sorted.sort();
        sorted.dedup();
        let all_valid = order
            .iter()
            .all(|d| d.axis < rank && d.level <= factors[d.axis].len());
        if sorted.len() != order.len() || order.len() != expected || !all_valid {
            return Err(AlgebraError::Invalid(format!(
                "physical axes {order:?} are not each digit of {factors:?} once"
            )));
        }
        for a in 0..rank {
            let levels: Vec<usize> = order
                .iter()
                .filter(|d| d.axis == a && d.level > 0)
                .map(|d| d.level)
                .collect();
            if levels.windows(2).any(|w| w[0] > w[1]) {
                return Err(AlgebraError::Invalid(format!(
                    "the blocks of axis {a} are not in outer-to-inner order"
                )));
            }
        }
        Ok(Layout {
            names,
            factors,
            order,
        })
    }

    /// The row-major layout of a rank.
    pub fn identity(rank: usize) -> Result<Layout, AlgebraError> {
        Layout::permutation(&(0..rank).collect::<Vec<_>>())
    }

    /// The layout whose physical axis `i` is logical axis `perm[i]` (a transpose).
    pub fn permutation(perm: &[usize]) -> Result<Layout, AlgebraError> {
        Layout::new(
            default_names(perm.len())?,
            vec![vec![]; perm.len()],
            perm.iter().map(|&axis| Digit { axis, level: 0 }).collect(),
        )
    }

    /// Parses a name such as "NHWC", "OIHW8i16o" or "NC/32HW32c" (the outer C
    /// counts blocks of 32: "NCHW32c"); the logical order of the
    /// letters is the canonical one (see the module comment). The permutation
    /// form that `Display` prints for other layouts, "(0,3,1,2,16@3)", parses too.
    pub fn parse(text: &str) -> Result<Layout, AlgebraError> {
        if text.starts_with('(') {
            return Layout::parse_permutation(text);
        }
        let mut letters: Vec<char> = text.chars().filter(|c| c.is_ascii_uppercase()).collect();
        letters.sort_by_key(|&c| canonical_rank(c));
        Layout::parse_with(&letters.iter().collect::<String>(), text)
    }

    /// The letters this layout prints with, `None` for the permutation form:
    /// its outer digits must be in row-major order or channels last (axis 1
    /// last), and its own letters are used when, sorted into the canonical
    /// logical order, they give back its logical axis order (then the name
    /// parses back to it), else the default letters of its rank.
    fn letters(&self) -> Option<Vec<char>> {
        let rank = self.rank();
        let outer: Vec<usize> = self
            .order
            .iter()
            .filter(|d| d.level == 0)
            .map(|d| d.axis)
            .collect();
        let row_major = outer.iter().enumerate().all(|(i, &a)| i == a);
        let channels_last = rank >= 3
            && outer[0] == 0
            && outer[rank - 1] == 1
            && (1..rank - 1).all(|i| outer[i] == i + 1);
        if !(row_major || channels_last || rank <= 2) {
            return None;
        }
        let own_read_back = self
            .names
            .windows(2)
            .all(|w| canonical_rank(w[0]) < canonical_rank(w[1]));
        match own_read_back {
            true => Some(self.names.clone()),
            false => default_names(rank).ok(),
        }
    }

    /// Parses the permutation form "(0,3,1,2,16@3)": the logical axis of each
    /// physical axis, outermost first; "16@3" is a block of 16 of axis 3 (an
    /// axis's blocks outer to inner in the order they appear).
    fn parse_permutation(text: &str) -> Result<Layout, AlgebraError> {
        let err = |message: String| AlgebraError::Parse {
            text: text.to_string(),
            message,
        };
        let inner = text
            .strip_prefix('(')
            .and_then(|t| t.strip_suffix(')'))
            .ok_or_else(|| err("expected '(' axes ')'".into()))?;
        let number = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| err(format!("'{t}' is not a number")))
        };
        let mut digits = Vec::new();
        for item in inner.split(',') {
            digits.push(match item.split_once('@') {
                Some((factor, axis)) => (number(axis)?, Some(number(factor)?)),
                None => (number(item)?, None),
            });
        }
        let rank = digits.iter().filter(|(_, f)| f.is_none()).count();
        let mut factors = vec![Vec::new(); rank];
        let mut order = Vec::with_capacity(digits.len());
        for (axis, factor) in digits {
            if axis >= rank {
                return Err(err(format!("axis {axis} of a rank-{rank} layout")));
            }
            let level = match factor {
                Some(f) => {
                    factors[axis].push(f);
                    factors[axis].len()
                }
                None => 0,
            };
            order.push(Digit { axis, level });
        }
        let names = default_names(rank)?;
        Layout::new(names, factors, order).map_err(|e| err(e.to_string()))
    }

    /// The name and, for a tensor of shape `logical`, every padded axis with
    /// its extent and the extent stored: "NCHW16c, C 24 padded to 32".
    pub fn describe(&self, logical: &[usize]) -> String {
        let mut s = self.to_string();
        for (a, &extent) in logical.iter().enumerate().take(self.rank()) {
            let padded = self.padded_extent(a, extent);
            if padded != extent {
                let axis = match self.letters() {
                    Some(names) => names[a].to_string(),
                    None => format!("axis {a}"),
                };
                s += &format!(", {axis} {extent} padded to {padded}");
            }
        }
        s
    }

    /// Parses `physical` with the logical axis order given by `logical` ("NCHW").
    pub fn parse_with(logical: &str, physical: &str) -> Result<Layout, AlgebraError> {
        let err = |message: String| AlgebraError::Parse {
            text: physical.to_string(),
            message,
        };
        let names: Vec<char> = logical.chars().collect();
        if let Some(c) = names.iter().find(|c| !c.is_ascii_uppercase()) {
            return Err(err(format!(
                "logical axis '{c}' is not an upper-case letter"
            )));
        }
        let mut factors = vec![Vec::new(); names.len()];
        let mut order = Vec::new();
        let mut seen_outer = vec![false; names.len()];
        let mut outer_blocks = Vec::new();
        let mut chars = physical.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_ascii_digit() {
                let mut num = c.to_string();
                while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
                    num.push(d);
                }
                let factor: usize = num
                    .parse()
                    .map_err(|_| err(format!("block factor {num} is too large")))?;
                if factor == 0 {
                    return Err(err("block factor 0".into()));
                }
                let Some(letter) = chars.next() else {
                    return Err(err(format!(
                        "block factor {num} is not followed by an axis"
                    )));
                };
                if !letter.is_ascii_lowercase() {
                    return Err(err(format!(
                        "block factor {num} must be followed by a lower-case axis, got '{letter}'"
                    )));
                }
                let upper = letter.to_ascii_uppercase();
                let Some(axis) = names.iter().position(|&n| n == upper) else {
                    return Err(err(format!(
                        "block '{letter}' of an axis '{upper}' that the layout lacks"
                    )));
                };
                factors[axis].push(factor);
                order.push(Digit {
                    axis,
                    level: factors[axis].len(),
                });
            } else if c.is_ascii_uppercase() {
                let Some(axis) = names.iter().position(|&n| n == c) else {
                    return Err(err(format!(
                        "axis '{c}' is not among the logical axes {logical}"
                    )));
                };
                if std::mem::replace(&mut seen_outer[axis], true) {
                    return Err(err(format!("axis '{c}' appears twice")));
                }
                order.push(Digit { axis, level: 0 });
                // "C/32": the outer digit of C counts blocks of 32 (checked
                // against the blocks once they are all read).
                if chars.next_if_eq(&'/').is_some() {
                    let mut num = String::new();
                    while let Some(d) = chars.next_if(|d| d.is_ascii_digit()) {
                        num.push(d);
                    }
                    let block = num
                        .parse::<usize>()
                        .map_err(|_| err(format!("'{c}/' must be followed by a block size")))?;
                    outer_blocks.push((axis, block));
                }
            } else {
                return Err(err(format!("unexpected character '{c}'")));
            }
        }
        if let Some(a) = seen_outer.iter().position(|s| !s) {
            return Err(err(format!("axis '{}' is missing", names[a])));
        }
        for (a, block) in outer_blocks {
            let product: usize = factors[a].iter().product();
            if product != block {
                return Err(err(format!(
                    "'{}/{block}' does not match the blocks of {} (product {product})",
                    names[a], names[a]
                )));
            }
        }
        Layout::new(names, factors, order).map_err(|e| err(e.to_string()))
    }

    /// The layout of `transpose(x, perm)` that keeps `x`'s bytes where they are:
    /// output axis j is input axis `perm[j]` and carries its blocks and letter along,
    /// so a transpose between the two layouts moves no data.
    pub fn transposed(&self, perm: &[usize]) -> Result<Layout, AlgebraError> {
        if perm.len() != self.rank() {
            return Err(AlgebraError::Invalid(format!(
                "perm {perm:?} does not fit layout {self}"
            )));
        }
        let mut out_axis = vec![usize::MAX; perm.len()];
        for (j, &a) in perm.iter().enumerate() {
            if a >= perm.len() || out_axis[a] != usize::MAX {
                return Err(AlgebraError::Invalid(format!(
                    "{perm:?} is not a permutation"
                )));
            }
            out_axis[a] = j;
        }
        Layout::new(
            perm.iter().map(|&a| self.names[a]).collect(),
            perm.iter().map(|&a| self.factors[a].clone()).collect(),
            self.order
                .iter()
                .map(|d| Digit {
                    axis: out_axis[d.axis],
                    level: d.level,
                })
                .collect(),
        )
    }

    /// The layout of `reshape(x, to)`, for `x` of shape `from` stored in this
    /// layout, that keeps `x`'s bytes where they are, when the reshape only
    /// drops or inserts axes of extent 1 (Squeeze, Unsqueeze, `[1,C,1,1]` to
    /// `[1,1,1,C]`): the other axes keep their physical order, blocks and padding,
    /// and each new unit axis sits before the first outer digit of a later axis
    /// (a row-major input gives a row-major output). `None` for any other
    /// reshape, or when a dropped unit axis is blocked (its padding would go).
    pub fn reshaped(&self, from: &[usize], to: &[usize]) -> Option<Layout> {
        if from.len() != self.rank() {
            return None;
        }
        let kept = |shape: &[usize]| -> Vec<usize> {
            (0..shape.len()).filter(|&a| shape[a] != 1).collect()
        };
        let (kept_in, kept_out) = (kept(from), kept(to));
        let extents_agree = kept_in.len() == kept_out.len()
            && kept_in
                .iter()
                .zip(&kept_out)
                .all(|(&i, &o)| from[i] == to[o]);
        let dropped_blocked = (0..from.len()).any(|a| from[a] == 1 && !self.factors[a].is_empty());
        if !extents_agree || dropped_blocked {
            return None;
        }
        let mut out_axis = vec![usize::MAX; from.len()];
        let mut factors = vec![Vec::new(); to.len()];
        for (&i, &o) in kept_in.iter().zip(&kept_out) {
            out_axis[i] = o;
            factors[o] = self.factors[i].clone();
        }
        let mut order: Vec<Digit> = self
            .order
            .iter()
            .filter(|d| from[d.axis] != 1)
            .map(|d| Digit {
                axis: out_axis[d.axis],
                level: d.level,
            })
            .collect();
        for unit in (0..to.len()).filter(|&a| to[a] == 1) {
            let at = order
                .iter()
                .position(|d| d.level == 0 && d.axis > unit)
                .unwrap_or(order.len());
            order.insert(
                at,
                Digit {
                    axis: unit,
                    level: 0,
                },
            );
        }
        Layout::new(default_names(to.len()).ok()?, factors, order).ok()
    }

    /// Logical rank.
    pub fn rank(&self) -> usize {
        self.factors.len()
    }

    /// Physical rank (one axis per digit).
    pub fn physical_rank(&self) -> usize {
        self.order.len()
    }

    /// The physical order of the digits, outermost first.
    pub fn order(&self) -> &[Digit] {
        &self.order
    }

    /// Block factors of a logical axis, outer to inner.
    pub fn factors(&self, axis: usize) -> &[usize] {
        &self.factors[axis]
    }

    /// Whether any axis is blocked.
    pub fn is_blocked(&self) -> bool {
        self.factors.iter().any(|f| !f.is_empty())
    }

    /// Whether the layout is the row-major one (no blocks, no permutation).
    pub fn is_identity(&self) -> bool {
        !self.is_blocked() && self.order.iter().enumerate().all(|(i, d)| d.axis == i)
    }

    /// The channel block `cb` when this layout stores a logical NCHW tensor of
    /// `shape` as NCHW{cb}c, the orders the convolution and pooling kernels
    /// run: NCHW is cb = 1, NHWC is cb = C (one block), NCHWxc is cb = x.
    pub fn channel_block(&self, shape: &[usize]) -> Option<usize> {
        if shape.len() != 4 || self.rank() != 4 {
            return None;
        }
        if self.is_identity() {
            return Some(1);
        }
        if self.as_permutation().as_deref() == Some(&[0, 2, 3, 1]) {
            return Some(shape[1]);
        }
        // N, the channel blocks, H, W, then the block's channels innermost.
        let others_plain = [0, 2, 3].iter().all(|&a| self.factors(a).is_empty());
        let order: Vec<(usize, usize)> = self.order.iter().map(|d| (d.axis, d.level)).collect();
        (self.factors(1).len() == 1
            && others_plain
            && order == [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1)])
        .then(|| self.factors(1)[0])
    }

    /// The logical axes in the order of their outermost physical digits.
    pub fn outer_order(&self) -> Vec<usize> {
        self.order
            .iter()
            .filter(|d| d.level == 0)
            .map(|d| d.axis)
            .collect()
    }

    /// This layout with the default letters of its rank (letters only print).
    pub fn with_default_letters(&self) -> Result<Layout, AlgebraError> {
        Layout::new(
            default_names(self.rank())?,
            self.factors.clone(),
            self.order.clone(),
        )
    }

    /// The permutation of an unblocked layout (physical axis i is logical `perm[i]`).
    pub fn as_permutation(&self) -> Option<Vec<usize>> {
        (!self.is_blocked()).then(|| self.order.iter().map(|d| d.axis).collect())
    }

    fn block(&self, axis: usize) -> usize {
        self.factors[axis].iter().product()
    }

    /// The extent of a logical axis once padded to a multiple of its block.
    pub fn padded_extent(&self, axis: usize, extent: usize) -> usize {
        let b = self.block(axis);
        extent.div_ceil(b) * b
    }

    fn check_rank(&self, logical: &[usize]) -> Result<(), AlgebraError> {
        if logical.len() != self.rank() {
            return Err(AlgebraError::Rank {
                layout: self.to_string(),
                shape: logical.to_vec(),
            });
        }
        Ok(())
    }

    /// The logical axes that are padded for a tensor of this shape.
    pub fn padded_axes(&self, logical: &[usize]) -> Result<Vec<usize>, AlgebraError> {
        self.check_rank(logical)?;
        Ok((0..self.rank())
            .filter(|&a| self.padded_extent(a, logical[a]) != logical[a])
            .collect())
    }

    /// Extent of one digit for a logical axis of extent `extent`.
    fn digit_extent(&self, d: Digit, extent: usize) -> usize {
        match d.level {
            0 => extent.div_ceil(self.block(d.axis)),
            l => self.factors[d.axis][l - 1],
        }
    }

    /// Physical shape of a logical shape.
    pub fn physical_shape(&self, logical: &[usize]) -> Result<Vec<usize>, AlgebraError> {
        self.check_rank(logical)?;
        Ok(self
            .order
            .iter()
            .map(|&d| self.digit_extent(d, logical[d.axis]))
            .collect())
    }

    /// Elements of the physical buffer of a logical shape (the product of
    /// `physical_shape`, without building it).
    pub fn physical_numel(&self, logical: &[usize]) -> Result<usize, AlgebraError> {
        self.check_rank(logical)?;
        Ok(logical
            .iter()
            .enumerate()
            .map(|(axis, &extent)| self.padded_extent(axis, extent))
            .product())
    }

    /// The digits of one logical coordinate of `axis`, outer to inner.
    fn digits_of(&self, axis: usize, mut i: usize) -> Vec<usize> {
        let f = &self.factors[axis];
        let mut digits = vec![0; f.len() + 1];
        for k in (0..f.len()).rev() {
            digits[k + 1] = i % f[k];
            i /= f[k];
        }
        digits[0] = i;
        digits
    }

    /// Physical index of a logical index (no bounds check beyond the rank).
    pub fn to_physical_index(&self, index: &[usize]) -> Result<Vec<usize>, AlgebraError> {
        self.check_rank(index)?;
        let digits: Vec<Vec<usize>> = (0..self.rank())
            .map(|a| self.digits_of(a, index[a]))
            .collect();
        Ok(self.order.iter().map(|d| digits[d.axis][d.level]).collect())
    }

    /// Logical index of a physical index, or `None` for a padding position.
    pub fn to_logical_index(
        &self,
        logical: &[usize],
        phys: &[usize],
    ) -> Result<Option<Vec<usize>>, AlgebraError> {
        self.check_rank(logical)?;
        if phys.len() != self.physical_rank() {
            return Err(AlgebraError::Rank {
                layout: self.to_string(),
                shape: phys.to_vec(),
            });
        }
        let mut index = vec![0usize; self.rank()];
        for a in 0..self.rank() {
            // Mixed radix: outer digit first, then each factor.
            let mut i = 0;
            for level in 0..=self.factors[a].len() {
                let pos = self
                    .order
                    .iter()
                    .position(|&d| d == Digit { axis: a, level })
                    .expect("every digit has a physical axis");
                let f = if level == 0 {
                    1
                } else {
                    self.factors[a][level - 1]
                };
                i = i * f + phys[pos];
            }
            if i >= logical[a] {
                return Ok(None);
            }
            index[a] = i;
        }
        Ok(Some(index))
    }

    /// For each logical axis, the physical element offset of each coordinate; the
    /// offset of a logical index is the sum over axes.
    pub fn offset_tables(&self, logical: &[usize]) -> Result<Vec<Vec<usize>>, AlgebraError> {
        let pshape = self.physical_shape(logical)?;
        let pstrides = strides(&pshape);
        let mut tables = Vec::with_capacity(self.rank());
        for (a, &extent) in logical.iter().enumerate() {
            let table = (0..extent)
                .map(|i| {
                    let digits = self.digits_of(a, i);
                    self.order
                        .iter()
                        .enumerate()
                        .filter(|(_, d)| d.axis == a)
                        .map(|(p, d)| digits[d.level] * pstrides[p])
                        .sum()
                })
                .collect();
            tables.push(table);
        }
        Ok(tables)
    }

    /// Physical offsets of every logical element, in logical row-major order.
    fn physical_offsets(&self, logical: &[usize]) -> Result<Vec<usize>, AlgebraError> {
        Ok(self.row_major_offsets(logical)?.collect())
    }

    /// The physical offset of every logical element of shape `logical`, in
    /// logical row-major order, one after another without a table of them.
    pub fn row_major_offsets(&self, logical: &[usize]) -> Result<RowMajorOffsets, AlgebraError> {
        let mut tables = self.offset_tables(logical)?;
        // A scalar is one element at offset 0: an inner axis of one.
        let inner = tables.pop().unwrap_or_else(|| vec![0]);
        Ok(RowMajorOffsets {
            remaining: numel(logical),
            outer_shape: logical[..tables.len()].to_vec(),
            index: vec![0; tables.len()],
            base: 0,
            at: 0,
            outer: tables,
            inner,
        })
    }

    /// Moves a logical row-major tensor into its physical buffer; padding
    /// positions get `fill` (converted to the tensor's element type).
    pub fn to_physical(&self, t: &Tensor, fill: f64) -> Result<Tensor, AlgebraError> {
        let pshape = self.physical_shape(&t.shape)?;
        let n = t.numel();
        // Index n is the fill element appended to the source.
        let mut src = vec![n; numel(&pshape)];
        for (i, off) in self.physical_offsets(&t.shape)?.into_iter().enumerate() {
            src[off] = i;
        }
        let data = with_fill(&t.data, fill).gather(src.into_iter());
        Ok(Tensor::new(pshape, data))
    }

    /// Reads the logical tensor of shape `logical` back out of a physical buffer.
    pub fn from_physical(&self, t: &Tensor, logical: &[usize]) -> Result<Tensor, AlgebraError> {
        let pshape = self.physical_shape(logical)?;
        if t.shape != pshape {
            return Err(AlgebraError::Invalid(format!(
                "tensor of shape {:?} is not the physical shape {pshape:?} of {:?} in {self}",
                t.shape, logical
            )));
        }
        let offsets = self.physical_offsets(logical)?;
        Ok(Tensor::new(
            logical.to_vec(),
            t.data.gather(offsets.into_iter()),
        ))
    }

    /// The layout `then` applied to this layout's physical tensor, as one layout
    /// of the logical tensor. Fails when the result is not a layout: a block that
    /// does not divide an inner block, or blocks of an axis out of order.
    pub fn compose(&self, then: &Layout) -> Result<Layout, AlgebraError> {
        if then.rank() != self.physical_rank() {
            return Err(AlgebraError::NotComposable {
                first: self.to_string(),
                then: then.to_string(),
                why: format!(
                    "the second has rank {}, the first's physical rank is {}",
                    then.rank(),
                    self.physical_rank()
                ),
            });
        }
        let fail = |why: String| AlgebraError::NotComposable {
            first: self.to_string(),
            then: then.to_string(),
            why,
        };
        // Each digit (a, l) of self is physical axis p, which `then` splits into
        // sub-digits k = 0..=m. The new radix of axis a lists, outer to inner, the
        // sub-digits of its digits in level order; entries are (l, k, p, extent).
        // Sub-digit 0 of a block digit has the fixed extent f / (product of g).
        let mut pieces: Vec<Vec<(usize, usize, usize, usize)>> = vec![Vec::new(); self.rank()];
        for (p, &d) in self.order.iter().enumerate() {
            let g = &then.factors[p];
            let gprod: usize = g.iter().product();
            let outer = if d.level == 0 {
                0 // the axis's outer digit: its extent is not fixed
            } else {
                let f = self.factors[d.axis][d.level - 1];
                if !f.is_multiple_of(gprod) {
                    return Err(fail(format!(
                        "blocks {g:?} do not divide the block {f} of axis {}",
                        self.names[d.axis]
                    )));
                }
                f / gprod
            };
            pieces[d.axis].push((d.level, 0, p, outer));
            for (k, &gk) in g.iter().enumerate() {
                pieces[d.axis].push((d.level, k + 1, p, gk));
            }
        }
        let mut factors = Vec::with_capacity(self.rank());
        for list in &mut pieces {
            list.sort();
            // The first piece is the new outer digit; the rest are block factors.
            factors.push(list[1..].iter().map(|&(_, _, _, e)| e).collect());
        }
        let new_digit = |p: usize, k: usize| {
            let axis = self.order[p].axis;
            let level = pieces[axis]
                .iter()
                .position(|&(_, kk, pp, _)| pp == p && kk == k)
                .expect("each digit of `then` is a piece");
            Digit { axis, level }
        };
        let order = then
            .order
            .iter()
            .map(|d| new_digit(d.axis, d.level))
            .collect();
        Layout::new(self.names.clone(), factors, order).map_err(|e| fail(e.to_string()))
    }

    /// The inverse of an unblocked layout (the inverse permutation).
    pub fn inverse(&self) -> Result<Layout, AlgebraError> {
        let perm = self.as_permutation().ok_or_else(|| {
            AlgebraError::Invalid(format!(
                "{self} is blocked: its inverse is a crop, not a layout"
            ))
        })?;
        let mut inv = vec![0; perm.len()];
        for (i, &p) in perm.iter().enumerate() {
            inv[p] = i;
        }
        Layout::permutation(&inv)
    }
}

/// `data` with one more element holding `fill`.
pub fn with_fill(data: &TensorData, fill: f64) -> TensorData {
    let one = TensorData::from_f64(data.dtype(), vec![fill]);
    TensorData::concat(&[data, &one]).expect("from_f64 builds data of the requested type")
}

impl PartialEq for Layout {
    fn eq(&self, other: &Layout) -> bool {
        self.factors == other.factors && self.order == other.order
    }
}

impl Eq for Layout {}

impl Hash for Layout {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.factors.hash(state);
        self.order.hash(state);
    }
}

impl PartialOrd for Layout {
    fn partial_cmp(&self, other: &Layout) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Layout {
    fn cmp(&self, other: &Layout) -> Ordering {
        (&self.factors, &self.order).cmp(&(&other.factors, &other.order))
    }
}

/// The physical offsets of a layout's logical elements in row-major order
/// (`Layout::row_major_offsets`): the innermost axis is one pass over its
/// offset table per position of the outer axes, whose offsets are summed
/// once per row (a sum over every axis per element was 10% of the samples of
/// a warm compile of ResNet50 from TFLite, and building layout transforms
/// was a sixth of a cold plan).
pub struct RowMajorOffsets {
    /// Per outer axis, the offset of each coordinate.
    outer: Vec<Vec<usize>>,
    outer_shape: Vec<usize>,
    /// The offset of each coordinate of the innermost axis.
    inner: Vec<usize>,
    /// The outer axes' coordinates of the current row, and their offset.
    index: Vec<usize>,
    base: usize,
    /// The next coordinate on the innermost axis.
    at: usize,
    remaining: usize,
}

impl Iterator for RowMajorOffsets {
    type Item = usize;

    // Inlined into the loops that walk two layouts in step (a call per
    // element was a third of building a layout transform).
    #[inline]
    fn next(&mut self) -> Option<usize> {
        self.remaining = self.remaining.checked_sub(1)?;
        let offset = self.base + self.inner[self.at];
        self.at += 1;
        if self.at == self.inner.len() {
            self.at = 0;
            next_index(&mut self.index, &self.outer_shape);
            self.base = (self.index.iter().zip(&self.outer))
                .map(|(&i, t)| t[i])
                .sum();
        }
        Some(offset)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for RowMajorOffsets {}

impl fmt::Display for Layout {
    /// Letters for the row-major, channels-last and channel-blocked orders
    /// (with the layout's own letters when they read back as it, else the
    /// default ones), else the permutation form; see the module comment.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(names) = self.letters() else {
            let digits: Vec<String> = self
                .order
                .iter()
                .map(|d| match d.level {
                    0 => d.axis.to_string(),
                    l => format!("{}@{}", self.factors[d.axis][l - 1], d.axis),
                })
                .collect();
            return write!(f, "({})", digits.join(","));
        };
        for d in &self.order {
            let name = names[d.axis];
            if d.level == 0 {
                write!(f, "{name}")?;
            } else {
                write!(
                    f,
                    "{}{}",
                    self.factors[d.axis][d.level - 1],
                    name.to_ascii_lowercase()
                )?;
            }
        }
        Ok(())
    }
}

impl FromStr for Layout {
    type Err = AlgebraError;
    fn from_str(s: &str) -> Result<Layout, AlgebraError> {
        Layout::parse(s)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn iota(shape: &[usize]) -> Tensor {
        Tensor::from_f32(
            shape.to_vec(),
            (0..numel(shape)).map(|i| i as f32 + 1.0).collect(),
        )
    }

    #[test]
    fn usual_names_round_trip_and_mean_what_they_say() {
        for name in [
            "NCHW",
            "NHWC",
            "NCHW16c",
            "OIHW8i16o",
            "NCDHW",
            "NC",
            "NHWC8c",
        ] {
            let l = Layout::parse(name).unwrap();
            assert_eq!(l.to_string(), name);
            assert_eq!(Layout::parse(&l.to_string()).unwrap(), l);
        }
        assert!(Layout::parse("NCHW").unwrap().is_identity());
        assert_eq!(
            Layout::parse("NHWC").unwrap().as_permutation(),
            Some(vec![0, 2, 3, 1])
        );
        // "NC/32HW32c" spells out that the outer C counts blocks of 32.
        assert_eq!(
            Layout::parse("NC/32HW32c").unwrap(),
            Layout::parse("NCHW32c").unwrap()
        );
        assert!(Layout::parse("NC/16HW32c").is_err());
        // OIHW and NCHW are the same (identity) layout of a rank-4 tensor.
        assert_eq!(Layout::parse("OIHW").unwrap(), Layout::identity(4).unwrap());
        let oihw = Layout::parse("OIHW8i16o").unwrap();
        assert_eq!(oihw.factors(0), &[16]);
        assert_eq!(oihw.factors(1), &[8]);
    }

    #[test]
    fn transposed_layouts_print_apart_from_their_letters() {
        let blocked = Layout::parse("NCHW16c").unwrap();
        // The output of a transpose to NHWC that keeps the bytes where they are.
        let t = blocked.transposed(&[0, 2, 3, 1]).unwrap();
        assert_eq!(t.to_string(), "(0,3,1,2,16@3)");
        assert_eq!(Layout::parse(&t.to_string()).unwrap(), t);
        assert_ne!(t, blocked);
        // An NHWC tensor transposed to NHWC is stored row-major: its carried
        // letters (N, H, W, C) do not name it.
        let nhwc_of_nhwc = Layout::parse("NHWC")
            .unwrap()
            .transposed(&[0, 2, 3, 1])
            .unwrap();
        assert!(nhwc_of_nhwc.is_identity());
        assert_eq!(nhwc_of_nhwc.to_string(), "NCHW");
        // A transposed row-major layout is row-major again only for the identity.
        let back = t.transposed(&[0, 3, 1, 2]).unwrap();
        assert_eq!(back.to_string(), "NCHW16c");
        assert_eq!(
            Layout::identity(4)
                .unwrap()
                .transposed(&[0, 2, 3, 1])
                .unwrap()
                .to_string(),
            "(0,3,1,2)"
        );
        assert_eq!(
            blocked.describe(&[1, 24, 7, 7]),
            "NCHW16c, C 24 padded to 32"
        );
        assert_eq!(
            t.describe(&[1, 7, 7, 24]),
            "(0,3,1,2,16@3), axis 3 24 padded to 32"
        );
        for bad in ["(0,1", "(0,0)", "(0,x)", "(0,16@2)"] {
            assert!(Layout::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reshapes_of_unit_axes_keep_the_bytes() {
        let blocked = Layout::parse("NCHW16c").unwrap();
        // A squeeze-excite path: the pooled [1, 48, 1, 1] as [1, 1, 1, 48] and [1, 48].
        let nhwc = blocked.reshaped(&[1, 48, 1, 1], &[1, 1, 1, 48]).unwrap();
        assert_eq!(nhwc.to_string(), "NCHW16w");
        let flat = blocked.reshaped(&[1, 48, 1, 1], &[1, 48]).unwrap();
        assert_eq!(flat.to_string(), "NC16c");
        let row_major = Layout::identity(2).unwrap();
        assert!(row_major
            .reshaped(&[2, 5], &[2, 1, 5, 1])
            .unwrap()
            .is_identity());
        // Padding (40 channels in blocks of 16) moves with its axis.
        let padded = blocked.reshaped(&[1, 40, 1, 1], &[1, 40]).unwrap();
        assert_eq!(padded.describe(&[1, 40]), "NC16c, C 40 padded to 48");
        // Merging axes, or dropping a blocked unit axis, is no relabelling.
        assert!(blocked.reshaped(&[1, 16, 2, 2], &[1, 64]).is_none());
        assert!(blocked.reshaped(&[2, 1, 3, 3], &[2, 3, 3]).is_none());
        // Every element keeps its offset.
        for (from, to) in [
            (vec![1, 48, 1, 1], vec![1, 1, 1, 48]),
            (vec![1, 40, 1, 1], vec![1, 40]),
            (vec![2, 32, 3, 1], vec![2, 1, 32, 3]),
        ] {
            let x = iota(&from);
            let l = blocked.reshaped(&from, &to).unwrap();
            let y = x.reshaped(to.clone());
            assert_eq!(
                blocked.to_physical(&x, 0.0).unwrap().to_f32(),
                l.to_physical(&y, 0.0).unwrap().to_f32()
            );
        }
    }

    #[test]
    fn physical_shapes_round_blocks_up() {
        let l = Layout::parse("NCHW16c").unwrap();
        assert_eq!(
            l.physical_shape(&[1, 17, 5, 7]).unwrap(),
            vec![1, 2, 5, 7, 16]
        );
        assert_eq!(l.padded_axes(&[1, 17, 5, 7]).unwrap(), vec![1]);
        assert_eq!(l.padded_axes(&[1, 32, 5, 7]).unwrap(), Vec::<usize>::new());
        // O = 33 in blocks of 16 -> 3 outer; I = 17 in blocks of 8 -> 3 outer.
        let w = Layout::parse("OIHW8i16o").unwrap();
        assert_eq!(
            w.physical_shape(&[33, 17, 3, 3]).unwrap(),
            vec![3, 3, 3, 3, 8, 16]
        );
        assert_eq!(
            w.physical_numel(&[33, 17, 3, 3]).unwrap(),
            3 * 3 * 9 * 8 * 16
        );
        assert_eq!(l.physical_numel(&[1, 17, 5, 7]).unwrap(), 2 * 5 * 7 * 16);
        assert!(l.physical_shape(&[1, 17, 5]).is_err());
        assert!(l.physical_numel(&[1, 17, 5]).is_err());
    }

    #[test]
    fn index_maps_are_hand_checked() {
        let l = Layout::parse("NCHW16c").unwrap();
        let shape = [2, 17, 4, 5];
        // c = 17 = 1 * 16 + 1.
        assert_eq!(
            l.to_physical_index(&[1, 17, 2, 3]).unwrap(),
            vec![1, 1, 2, 3, 1]
        );
        assert_eq!(
            l.to_logical_index(&shape, &[1, 1, 2, 3, 0]).unwrap(),
            Some(vec![1, 16, 2, 3])
        );
        // c = 1 * 16 + 5 = 21 >= 17: padding.
        assert_eq!(l.to_logical_index(&shape, &[1, 1, 2, 3, 5]).unwrap(), None);
        // OIHW8i16o: o = 20 -> (1, 4), i = 9 -> (1, 1).
        let w = Layout::parse("OIHW8i16o").unwrap();
        assert_eq!(
            w.to_physical_index(&[20, 9, 2, 1]).unwrap(),
            vec![1, 1, 2, 1, 1, 4]
        );
    }

    /// The padding RFC's example: a 14-element tensor held in a 4x4 layout.
    #[test]
    fn fourteen_elements_in_four_by_four() {
        let l = Layout::parse_with("A", "A4a").unwrap();
        let x = iota(&[14]);
        assert_eq!(l.physical_shape(&[14]).unwrap(), vec![4, 4]);
        let p = l.to_physical(&x, 0.0).unwrap();
        let mut want: Vec<f32> = (1..=14).map(|i| i as f32).collect();
        want.extend([0.0, 0.0]);
        assert_eq!(p.to_f32(), want);
        // AC[io, ii] holds A[4 * io + ii] when 4 * io + ii < 14, else padding.
        for io in 0..4 {
            for ii in 0..4 {
                let logical = l.to_logical_index(&[14], &[io, ii]).unwrap();
                let flat = 4 * io + ii;
                assert_eq!(logical, (flat < 14).then(|| vec![flat]));
            }
        }
        assert_eq!(l.from_physical(&p, &[14]).unwrap(), x);
    }

    #[test]
    fn nhwc_is_a_transpose() {
        let l = Layout::parse("NHWC").unwrap();
        let x = iota(&[1, 2, 2, 3]);
        let p = l.to_physical(&x, 0.0).unwrap();
        assert_eq!(p.shape, vec![1, 2, 3, 2]);
        // p[0, h, w, c] = x[0, c, h, w] = 1 + c * 6 + h * 3 + w.
        let v = p.to_f32();
        for h in 0..2 {
            for w in 0..3 {
                for c in 0..2 {
                    assert_eq!(v[h * 6 + w * 2 + c], (1 + c * 6 + h * 3 + w) as f32);
                }
            }
        }
        assert_eq!(
            l.inverse().unwrap().as_permutation(),
            Some(vec![0, 3, 1, 2])
        );
        assert_eq!(
            l.compose(&l.inverse().unwrap()).unwrap(),
            Layout::identity(4).unwrap()
        );
    }

    #[test]
    fn compose_of_named_layouts() {
        // NCHW16c, then move the outer C after W: NHWC16c... in physical terms
        // [N, C, H, W, c] -> [N, H, W, C, c].
        let a = Layout::parse("NCHW16c").unwrap();
        let b = Layout::permutation(&[0, 2, 3, 1, 4]).unwrap();
        assert_eq!(a.compose(&b).unwrap(), Layout::parse("NHWC16c").unwrap());
        // Splitting the 16-block by 4 nests blocks: NCHW4c4c.
        let split_inner = Layout::parse_with("ABCDE", "ABCDE4e").unwrap();
        assert_eq!(
            a.compose(&split_inner).unwrap(),
            Layout::parse("NCHW4c4c").unwrap()
        );
        // A block of 5 does not divide the block 16.
        let bad = Layout::parse_with("ABCDE", "ABCDE5e").unwrap();
        assert!(matches!(
            a.compose(&bad),
            Err(AlgebraError::NotComposable { .. })
        ));
    }

    #[test]
    fn bad_names_are_errors() {
        for bad in [
            "NCHW16",
            "NCHW0c",
            "NCHW16x",
            "NCCHW",
            "NCHW16C",
            "NC-HW",
            "NCHW99999999999999999999c",
        ] {
            let e = Layout::parse(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
        assert!(Layout::parse_with("NCHW", "NCH").is_err());
    }

    /// A random layout of `rank` axes: up to two blocks per axis, digits in a
    /// random physical order (blocks of one axis kept outer to inner).
    pub(crate) fn layout_strategy(rank: usize) -> impl Strategy<Value = Layout> {
        (
            proptest::collection::vec(proptest::collection::vec(1usize..5, 0..=2), rank),
            proptest::collection::vec(any::<u32>(), 3 * rank),
        )
            .prop_map(move |(factors, keys)| {
                let mut digits: Vec<Digit> = (0..rank)
                    .flat_map(|axis| {
                        (0..=factors[axis].len()).map(move |level| Digit { axis, level })
                    })
                    .collect();
                let mut keyed: Vec<(u32, Digit)> =
                    digits.iter().zip(&keys).map(|(d, &k)| (k, *d)).collect();
                keyed.sort();
                digits = keyed.into_iter().map(|(_, d)| d).collect();
                // Renumber block levels so each axis's blocks appear outer to inner.
                let mut next = vec![0; rank];
                for d in &mut digits {
                    if d.level > 0 {
                        next[d.axis] += 1;
                        d.level = next[d.axis];
                    }
                }
                Layout::new(default_names(rank).unwrap(), factors, digits).unwrap()
            })
    }

    pub(crate) fn shape_and_layout() -> impl Strategy<Value = (Vec<usize>, Layout)> {
        (1usize..=4).prop_flat_map(|rank| {
            (
                proptest::collection::vec(1usize..7, rank),
                layout_strategy(rank),
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn transform_then_inverse_is_identity((shape, l) in shape_and_layout()) {
            let x = iota(&shape);
            let p = l.to_physical(&x, -1.0).unwrap();
            prop_assert_eq!(&p.shape, &l.physical_shape(&shape).unwrap());
            prop_assert_eq!(l.from_physical(&p, &shape).unwrap(), x);
            prop_assert_eq!(Layout::parse(&l.to_string()).unwrap(), l.clone());
        }

        #[test]
        fn every_printed_name_reads_back(
            (l, perm) in shape_and_layout().prop_flat_map(|(shape, l)| {
                let perm = Just((0..shape.len()).collect::<Vec<_>>()).prop_shuffle();
                (Just(l), perm)
            })
        ) {
            // Transposing carries letters into a non-canonical order.
            let t = l.transposed(&perm).unwrap();
            prop_assert_eq!(Layout::parse(&t.to_string()).unwrap(), t);
        }

        #[test]
        fn index_maps_agree_with_the_buffer((shape, l) in shape_and_layout()) {
            let x = iota(&shape);
            let p = l.to_physical(&x, -1.0).unwrap();
            let (pv, ps) = (p.to_f32(), strides(&p.shape));
            let xs = strides(&shape);
            let mut logical_seen = 0;
            // Walk every physical position: a logical one holds its element and
            // maps back to its physical index; a padding one holds the fill.
            for (off, &value) in pv.iter().enumerate() {
                let pidx: Vec<usize> = ps.iter().zip(&p.shape).map(|(&s, &e)| off / s % e).collect();
                match l.to_logical_index(&shape, &pidx).unwrap() {
                    Some(idx) => {
                        logical_seen += 1;
                        let flat: usize = idx.iter().zip(&xs).map(|(i, s)| i * s).sum();
                        prop_assert_eq!(value, flat as f32 + 1.0);
                        prop_assert_eq!(l.to_physical_index(&idx).unwrap(), pidx);
                    }
                    None => prop_assert_eq!(value, -1.0),
                }
            }
            prop_assert_eq!(logical_seen, numel(&shape));
        }

        #[test]
        fn compose_is_one_then_the_other(
            (shape, a, b) in shape_and_layout().prop_flat_map(|(shape, a)| {
                let r = a.physical_rank();
                (Just(shape), Just(a), layout_strategy(r))
            })
        ) {
            let x = iota(&shape);
            let two_steps = b.to_physical(&a.to_physical(&x, -1.0).unwrap(), -1.0).unwrap();
            match a.compose(&b) {
                Ok(c) => prop_assert_eq!(c.to_physical(&x, -1.0).unwrap(), two_steps),
                // Refused only for a block that does not divide an inner block,
                // or blocks of one axis that the naming cannot order.
                Err(AlgebraError::NotComposable { why, .. }) => prop_assert!(
                    why.contains("do not divide") || why.contains("outer-to-inner"),
                    "{}",
                    why
                ),
                Err(e) => prop_assert!(false, "unexpected error {}", e),
            }
        }
    }
}
