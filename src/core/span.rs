//! Spans: where a node came from in the source model (see the "TVM Explorer Infrastructure" RFC).
//!
//! Every node carries a sequence of spans. A node imported one-to-one has one;
//! a node that a pass built from several source nodes carries all of theirs, in
//! source order, so a user can always trace a kernel back to the layers it came from.

use std::fmt;
use std::sync::Arc;

/// One source layer: model file, layer (node) name, op type and node index.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Span {
    /// The model file, as the user named it.
    pub file: Arc<str>,
    /// The layer (node) name in the model.
    pub layer: Arc<str>,
    /// The source op type.
    pub op_type: Arc<str>,
    /// Position of the layer in the source model's node list.
    pub index: usize,
}

impl Span {
    /// A span of one source layer.
    pub fn new(file: &str, layer: &str, op_type: &str, index: usize) -> Span {
        Span {
            file: file.into(),
            layer: layer.into(),
            op_type: op_type.into(),
            index,
        }
    }

    /// The model file's name without its folders: what artefacts (exports,
    /// explorer pages, JSON documents) record, so none names a folder of the
    /// machine that made it.
    pub fn file_name(&self) -> &str {
        std::path::Path::new(&*self.file)
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or(&self.file)
    }

    /// The stable name given to a source node that has none: op type and index.
    pub fn default_layer_name(op_type: &str, index: usize) -> String {
        format!("{op_type}_{index}")
    }
}

/// A span in JSON reports: `{"file", "layer", "op_type", "index"}`, the file
/// by its name only.
impl serde::Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let mut st = s.serialize_struct("Span", 4)?;
        st.serialize_field("file", self.file_name())?;
        st.serialize_field("layer", &*self.layer)?;
        st.serialize_field("op_type", &*self.op_type)?;
        st.serialize_field("index", &self.index)?;
        st.end()
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: layer '{}' ({} #{})",
            self.file, self.layer, self.op_type, self.index
        )
    }
}

/// Merges span sequences, keeping each span once, in source order.
pub fn merge_spans<'a>(seqs: impl IntoIterator<Item = &'a [Span]>) -> Vec<Span> {
    let mut out: Vec<Span> = seqs.into_iter().flatten().cloned().collect();
    out.sort_by(|a, b| (a.index, &a.layer, &a.file).cmp(&(b.index, &b.layer, &b.file)));
    out.dedup();
    out
}

/// [`format_spans`] with the file named without its folders, for artefacts.
pub fn format_spans_portable(spans: &[Span]) -> String {
    let named: Vec<Span> = spans
        .iter()
        .map(|s| Span {
            file: s.file_name().into(),
            ..s.clone()
        })
        .collect();
    format_spans(&named)
}

/// Formats a span sequence: "file: layer 'a' (Conv #3) + layer 'b' (Relu #4)".
pub fn format_spans(spans: &[Span]) -> String {
    match spans {
        [] => "<no source layer>".to_string(),
        [one] => one.to_string(),
        [first, rest @ ..] => {
            let mut s = first.to_string();
            for sp in rest {
                s.push_str(&format!(
                    " + layer '{}' ({} #{})",
                    sp.layer, sp.op_type, sp.index
                ));
            }
            s
        }
    }
}
