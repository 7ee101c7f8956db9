//! Text features: TfIdfVectorizer, n-gram counts of token ids. Pools of
//! strings are refused (there are no string tensors); a tokenizer's ids
//! stand in for them.

use super::context::{NodeCtx, Res};
use super::registry::{Registry, AI_ONNX};
use crate::graph::{Op, ValueRef};
use crate::ops::{NgramCounts, NgramWeighting};

pub(super) fn register(reg: &mut Registry) {
    reg.add(AI_ONNX, "TfIdfVectorizer", tf_idf_vectorizer);
}

fn tf_idf_vectorizer(c: &mut NodeCtx) -> Res<Vec<Option<ValueRef>>> {
    if c.attr("pool_strings").is_some() {
        return Err(c.err(
            "TfIdfVectorizer with pool_strings is not supported: string tensors are not; \
             give the pool as pool_int64s of token ids",
        ));
    }
    let weighting = match c.string("mode", "")?.as_str() {
        "TF" => NgramWeighting::Tf,
        "IDF" => NgramWeighting::Idf,
        "TFIDF" => NgramWeighting::TfIdf,
        other => {
            return Err(c.err(format!(
                "TfIdfVectorizer mode must be TF, IDF or TFIDF, got '{other}'"
            )))
        }
    };
    let count = |name: &str| -> Res<usize> {
        let v = c.int(name, -1)?;
        usize::try_from(v).map_err(|_| {
            c.err(format!(
                "TfIdfVectorizer {name} must be given and at least 0, got {v}"
            ))
        })
    };
    let lengths = (count("min_gram_length")?, count("max_gram_length")?);
    let max_skip = count("max_skip_count")?;
    let offsets = |name: &str| -> Res<Vec<usize>> {
        let v = c.ints(name)?.unwrap_or_default();
        (v.iter().map(|&x| usize::try_from(x)))
            .collect::<Result<_, _>>()
            .map_err(|_| {
                c.err(format!(
                    "TfIdfVectorizer {name} must not be negative, got {v:?}"
                ))
            })
    };
    let (starts, coords) = (offsets("ngram_counts")?, offsets("ngram_indexes")?);
    let pool = c.ints("pool_int64s")?.unwrap_or_default();
    let weights = c.floats("weights")?.unwrap_or_default();
    let op = NgramCounts::new(lengths, max_skip, weighting, pool, starts, coords, weights)
        .map_err(|e| c.err(format!("TfIdfVectorizer: {e}")))?;
    c.emit_all(Op::NgramCounts(op))
}
