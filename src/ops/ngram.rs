//! TfIdfVectorizer (ONNX opset 9): how often each n-gram of a pool occurs in
//! each row of an integer sequence, weighted as term frequencies (TF), as
//! presence times a weight (IDF) or as counts times a weight (TFIDF).
//!
//! An n-gram may take its items `d` apart for every `d` from 1 (adjacent) to
//! `max_skip_count + 1`; 1-grams are counted once, not once per distance.
//! The pool lists its n-grams by size, each size from its offset in
//! `ngram_counts`, and `ngram_indexes` gives each one (in pool order, every
//! size counted) its output coordinate; only sizes from `min_gram_length` to
//! `max_gram_length` are looked for. The i-th weight scales the i-th n-gram of
//! the pool, at its output coordinate, as the specification says and
//! onnxruntime does (the specification's Python reference reads weights by
//! output coordinate instead; the two agree where `ngram_indexes` is 0, 1,
//! 2, ...). A pool listing an n-gram twice counts it at the later one's
//! coordinate.
//!
//! The pool is searched as a trie: from each start, one lookup per item
//! extends the n-gram by one, and the walk stops at the first n-gram that no
//! pool entry begins with.

use super::onnx::*;
use super::shape::sole_input;
use super::*;
use crate::core::TensorData;
use std::collections::HashMap;

/// How counts become outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NgramWeighting {
    /// The count.
    Tf,
    /// The weight where the count is not 0, else 0.
    Idf,
    /// The count times the weight.
    TfIdf,
}

impl NgramWeighting {
    /// The ONNX `mode` spelling.
    pub fn name(self) -> &'static str {
        match self {
            NgramWeighting::Tf => "TF",
            NgramWeighting::Idf => "IDF",
            NgramWeighting::TfIdf => "TFIDF",
        }
    }
}

/// TfIdfVectorizer: x (C) or (N, C) of integers -> (W) or (N, W) f32, W the
/// largest output coordinate plus one.
#[derive(Clone, Debug, PartialEq)]
pub struct NgramCounts {
    /// The shortest and the longest n-gram looked for.
    lengths: (usize, usize),
    /// Items an n-gram may skip between two of its own, at most.
    max_skip: usize,
    /// How counts become outputs.
    weighting: NgramWeighting,
    /// The pool as given (ONNX `pool_int64s`, `ngram_counts`,
    /// `ngram_indexes`): items, where each size's n-grams start, and each
    /// n-gram's output coordinate.
    pool: Vec<i64>,
    starts: Vec<usize>,
    coords: Vec<usize>,
    /// Weights of the pool's n-grams, in pool order; empty for all 1.
    weights: Vec<f32>,
    /// Those weights by output coordinate (1 where none is given).
    coord_weights: Vec<f32>,
    trie: Trie,
}

/// The pool's n-grams of the sizes looked for: node 0 is the empty n-gram,
/// each edge appends one item.
#[derive(Clone, Debug, Default, PartialEq)]
struct Trie {
    next: HashMap<(usize, i64), usize>,
    /// The output coordinate of each node's n-gram, where the pool has it.
    coord: Vec<Option<usize>>,
}

impl Trie {
    /// The node of the n-gram `node` extended by `item`, made if new.
    fn extend(&mut self, node: usize, item: i64) -> usize {
        let fresh = self.coord.len();
        let next = *self.next.entry((node, item)).or_insert(fresh);
        if next == fresh {
            self.coord.push(None);
        }
        next
    }
}

impl NgramCounts {
    /// The op of these attributes, its pool checked: offsets ascending
    /// within the pool, each size's items a whole number of n-grams, one
    /// output coordinate per n-gram, none or one weight per n-gram.
    pub fn new(
        lengths: (usize, usize),
        max_skip: usize,
        weighting: NgramWeighting,
        pool: Vec<i64>,
        starts: Vec<usize>,
        coords: Vec<usize>,
        weights: Vec<f32>,
    ) -> Result<NgramCounts, OpError> {
        let (min, max) = lengths;
        if min == 0 || max < min {
            return Err(OpError::Attribute(format!(
                "n-gram lengths must satisfy 1 <= min_gram_length <= max_gram_length, got {min} and {max}"
            )));
        }
        let mut trie = Trie {
            coord: vec![None],
            ..Trie::default()
        };
        let mut id = 0;
        for (i, &start) in starts.iter().enumerate() {
            let (size, end) = (i + 1, starts.get(i + 1).copied().unwrap_or(pool.len()));
            if start > end || end > pool.len() {
                return Err(OpError::Attribute(format!(
                    "ngram_counts {starts:?} are not ascending offsets into a pool of {}",
                    pool.len()
                )));
            }
            let items = &pool[start..end];
            if !items.len().is_multiple_of(size) {
                return Err(OpError::Attribute(format!(
                    "the pool's {size}-grams take {} items, not a multiple of {size}",
                    items.len()
                )));
            }
            for ngram in items.chunks(size) {
                let coord = *coords.get(id).ok_or_else(|| {
                    OpError::Attribute(format!(
                        "ngram_indexes has {} entries for more n-grams",
                        coords.len()
                    ))
                })?;
                if (min..=max).contains(&size) {
                    let node = (ngram.iter()).fold(0, |node, &item| trie.extend(node, item));
                    trie.coord[node] = Some(coord);
                }
                id += 1;
            }
        }
        if id != coords.len() {
            return Err(OpError::Attribute(format!(
                "ngram_indexes has {} entries for a pool of {id} n-grams",
                coords.len()
            )));
        }
        if !weights.is_empty() && weights.len() != id {
            return Err(OpError::Attribute(format!(
                "{} weights for a pool of {id} n-grams",
                weights.len()
            )));
        }
        let width = coords.iter().max().map_or(0, |c| c + 1);
        let mut coord_weights = vec![1f32; width];
        for (&c, &w) in coords.iter().zip(&weights) {
            coord_weights[c] = w;
        }
        Ok(NgramCounts {
            lengths,
            max_skip,
            weighting,
            pool,
            starts,
            coords,
            weights,
            coord_weights,
            trie,
        })
    }

    /// Output coordinates per row.
    pub fn width(&self) -> usize {
        self.coord_weights.len()
    }

    /// The outputs of `x` cut into `rows` rows of equal length, one after
    /// another.
    pub fn run(&self, x: &[i64], rows: usize) -> Vec<f32> {
        let width = self.width();
        let mut y = vec![0f32; rows * width];
        let row_len = x.len().checked_div(rows).unwrap_or(0);
        if width == 0 || row_len == 0 {
            return y;
        }
        for (row, out) in x.chunks(row_len).zip(y.chunks_mut(width)) {
            self.count(row, out);
            for (v, &weight) in out.iter_mut().zip(&self.coord_weights) {
                *v = match self.weighting {
                    NgramWeighting::Tf => *v,
                    NgramWeighting::Idf if *v > 0.0 => weight,
                    NgramWeighting::Idf => 0.0,
                    NgramWeighting::TfIdf => *v * weight,
                };
            }
        }
        y
    }

    /// Adds to `counts` the occurrences in `row` of the pool's n-grams.
    fn count(&self, row: &[i64], counts: &mut [f32]) {
        let (min, max) = self.lengths;
        for distance in 1..=self.max_skip + 1 {
            // 1-grams do not depend on the distance: counted at the first.
            let shortest = if distance == 1 { min } else { min.max(2) };
            if shortest > max {
                break;
            }
            for start in 0..row.len() {
                let mut node = 0;
                let items = row[start..].iter().step_by(distance).take(max);
                for (len, item) in (1..).zip(items) {
                    let Some(&next) = self.trie.next.get(&(node, *item)) else {
                        break;
                    };
                    node = next;
                    if let (true, Some(c)) = (len >= shortest, self.trie.coord[node]) {
                        counts[c] += 1.0;
                    }
                }
            }
        }
    }
}

impl OpDef for NgramCounts {
    fn name(&self) -> &'static str {
        "TfIdfVectorizer"
    }

    fn infer(&self, inputs: &[&ValueType]) -> Result<Vec<ValueType>, OpError> {
        let x = sole_input(inputs)?;
        if !matches!(x.dtype, DType::I32 | DType::I64) {
            return Err(OpError::DType(format!(
                "TfIdfVectorizer counts int32 or int64 items, got {}",
                x.dtype.name()
            )));
        }
        let shape = match x.shape[..] {
            [_] => vec![self.width()],
            [n, _] => vec![n, self.width()],
            _ => {
                return Err(OpError::Shape(format!(
                    "TfIdfVectorizer takes a sequence (C) or rows of them (N, C), got shape {:?}",
                    x.shape
                )))
            }
        };
        Ok(vec![ValueType::new(DType::F32, shape)])
    }

    fn eval(&self, x: &[&Tensor], outputs: &[ValueType]) -> Result<Vec<Tensor>, OpError> {
        let rows = if x[0].shape.len() == 2 {
            x[0].shape[0]
        } else {
            1
        };
        let y = self.run(&x[0].data.to_i64(), rows);
        Ok(vec![Tensor::new(
            outputs[0].shape.clone(),
            TensorData::F32(y),
        )])
    }

    fn to_onnx(&self, mut cx: OnnxCx) -> Result<Vec<String>, OpError> {
        let ints = |v: &[usize]| Attr::Ints(v.iter().map(|&x| x as i64).collect());
        let mut attrs = vec![
            ("min_gram_length", Attr::Int(self.lengths.0 as i64)),
            ("max_gram_length", Attr::Int(self.lengths.1 as i64)),
            ("max_skip_count", Attr::Int(self.max_skip as i64)),
            ("mode", Attr::Str(self.weighting.name())),
            ("pool_int64s", Attr::Ints(self.pool.clone())),
            ("ngram_counts", ints(&self.starts)),
            ("ngram_indexes", ints(&self.coords)),
        ];
        if !self.weights.is_empty() {
            attrs.push(("weights", Attr::Floats(self.weights.clone())));
        }
        cx.single("TfIdfVectorizer", cx.inputs, attrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(lengths: (usize, usize), skip: usize, mode: NgramWeighting) -> NgramCounts {
        // 1-grams 2, 3, 5, 4; 2-grams (5, 6), (7, 8), (6, 7); coordinates
        // 0..=6 in pool order.
        let pool = vec![2, 3, 5, 4, 5, 6, 7, 8, 6, 7];
        let (starts, coords) = (vec![0, 4], (0..7).collect());
        NgramCounts::new(lengths, skip, mode, pool, starts, coords, vec![]).unwrap()
    }

    #[test]
    fn counts_ngrams_at_every_distance_and_unigrams_once() {
        let x = [1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8];
        // Adjacent only: 3 three times; (7, 8), (6, 7), (5, 6) once each; 5 once.
        let y = op((1, 2), 0, NgramWeighting::Tf).run(&x, 1);
        assert_eq!(y, [0., 3., 1., 0., 1., 1., 1.]);
        // Up to 5 items skipped, 2-grams only: (7, 8) three times (7 at 5
        // with 8 at 6 and at 11, 7 at 8 with 8 at 11); (6, 7) and (5, 6)
        // once (the 6 at 7 comes before the 5 at 9).
        let y = op((2, 2), 5, NgramWeighting::Tf).run(&x, 1);
        assert_eq!(y, [0., 0., 0., 0., 1., 3., 1.]);
        // With 1-grams: each counted once, not once per distance.
        let y = op((1, 2), 5, NgramWeighting::Tf).run(&x, 1);
        assert_eq!(y, [0., 3., 1., 0., 1., 3., 1.]);
    }

    #[test]
    fn rows_are_counted_apart_and_weighted() {
        let x = [2, 2, 5, 6, 4, 3, 3, 3];
        let y = op((1, 2), 0, NgramWeighting::Tf).run(&x, 2);
        assert_eq!(y, [2., 0., 1., 0., 1., 0., 0., 0., 3., 0., 1., 0., 0., 0.]);
        // Weights follow the pool's n-grams to their coordinates: the first
        // (the 1-gram 2) is output 6, the fifth (the 2-gram (5, 6)) output 0.
        let weighted = |mode| {
            let (pool, starts) = (vec![2, 3, 5, 4, 5, 6, 7, 8, 6, 7], vec![0, 4]);
            let coords = vec![6, 1, 2, 3, 0, 5, 4];
            let weights = vec![0.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
            NgramCounts::new((1, 2), 0, mode, pool, starts, coords, weights).unwrap()
        };
        // 2, 2, 5, 6: the 2 twice, the 5 and (5, 6) once.
        let y = weighted(NgramWeighting::Idf).run(&x[..4], 1);
        assert_eq!(y, [5.0, 0., 3.0, 0., 0., 0., 0.5]);
        let y = weighted(NgramWeighting::TfIdf).run(&x[..4], 1);
        assert_eq!(y, [5.0, 0., 3.0, 0., 0., 0., 1.0]);
    }

    #[test]
    fn a_pool_that_does_not_fit_its_offsets_is_refused() {
        let make = |pool: Vec<i64>, starts: Vec<usize>, coords: Vec<usize>| {
            let op = NgramCounts::new((1, 2), 0, NgramWeighting::Tf, pool, starts, coords, vec![]);
            op.unwrap_err().to_string()
        };
        // Three items of 2-grams.
        let odd = make(vec![1, 2, 3, 4], vec![0, 1], vec![0, 1]);
        assert!(odd.contains("2-grams take 3 items"), "{odd}");
        let few = make(vec![1, 2, 3], vec![0, 1], vec![0]);
        assert!(few.contains("1 entries for more n-grams"), "{few}");
        let many = make(vec![1, 2, 3], vec![0, 1], vec![0, 1, 2]);
        assert!(many.contains("3 entries for a pool of 2"), "{many}");
        let back = make(vec![1, 2, 3], vec![2, 1], vec![0, 1]);
        assert!(back.contains("not ascending"), "{back}");
        let pool = (vec![1, 2], vec![0], vec![0, 1]);
        let weights = NgramCounts::new(
            (1, 1),
            0,
            NgramWeighting::Idf,
            pool.0,
            pool.1,
            pool.2,
            vec![1.0],
        );
        let weights = weights.unwrap_err().to_string();
        assert!(
            weights.contains("1 weights for a pool of 2 n-grams"),
            "{weights}"
        );
        let lengths = NgramCounts::new(
            (2, 1),
            0,
            NgramWeighting::Tf,
            vec![],
            vec![],
            vec![],
            vec![],
        );
        assert!(lengths.unwrap_err().to_string().contains("min_gram_length"));
    }
}
