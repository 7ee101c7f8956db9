//! What the padding of a tensor holds (`PadValue`), what an op needs there
//! (`Requirement`), and where unproven knowledge came from (`Assumption`).
//!
//! Following the "Buffer Layout Padding" RFC for TVM: padding holds either a
//! known value or `undef` (anything); a transform that pads writes a value it
//! chooses, and an op maps the padding of its inputs to that of its output.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// The content of a padding region.
#[derive(Clone, Copy, Debug)]
pub enum PadValue {
    /// Every padding element holds this value (compared bit for bit, so NaN is
    /// a value like any other).
    Known(f32),
    /// Nothing is known: any value may be there.
    Undef,
}

impl PadValue {
    /// The value, when known.
    pub fn known(self) -> Option<f32> {
        match self {
            PadValue::Known(v) => Some(v),
            PadValue::Undef => None,
        }
    }

    /// Whether this is known to be the value `v`.
    pub fn is(self, v: f32) -> bool {
        self == PadValue::Known(v)
    }

    /// Whether this is known and finite (so multiplying it by 0 gives 0).
    pub fn is_finite(self) -> bool {
        self.known().is_some_and(f32::is_finite)
    }

    /// The value the reference executor writes: undef padding is filled with NaN
    /// (the largest integer for integer tensors) so that any read of it shows.
    pub fn fill(self) -> f64 {
        match self {
            PadValue::Known(v) => v as f64,
            PadValue::Undef => f64::NAN,
        }
    }
}

impl PartialEq for PadValue {
    fn eq(&self, other: &PadValue) -> bool {
        match (self, other) {
            (PadValue::Known(a), PadValue::Known(b)) => a.to_bits() == b.to_bits(),
            (PadValue::Undef, PadValue::Undef) => true,
            _ => false,
        }
    }
}

impl Eq for PadValue {}

impl Hash for PadValue {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.known().map(f32::to_bits).hash(state);
    }
}

impl PartialOrd for PadValue {
    fn partial_cmp(&self, other: &PadValue) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for PadValue {
    fn cmp(&self, other: &PadValue) -> std::cmp::Ordering {
        self.known()
            .map(f32::to_bits)
            .cmp(&other.known().map(f32::to_bits))
    }
}

impl fmt::Display for PadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PadValue::Known(v) if *v == f32::INFINITY => f.write_str("inf"),
            PadValue::Known(v) if *v == f32::NEG_INFINITY => f.write_str("-inf"),
            PadValue::Known(v) if v.is_nan() => f.write_str("nan"),
            PadValue::Known(v) => write!(f, "{v:?}"),
            PadValue::Undef => f.write_str("undef"),
        }
    }
}

/// Text that is not a pad value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a pad value (a number, inf, -inf, nan or undef)")]
pub struct NotAPadValue(pub String);

impl FromStr for PadValue {
    type Err = NotAPadValue;
    fn from_str(s: &str) -> Result<PadValue, NotAPadValue> {
        match s {
            "undef" => Ok(PadValue::Undef),
            "inf" => Ok(PadValue::Known(f32::INFINITY)),
            "-inf" => Ok(PadValue::Known(f32::NEG_INFINITY)),
            "nan" => Ok(PadValue::Known(f32::NAN)),
            _ => s
                .parse::<f32>()
                .map(PadValue::Known)
                .map_err(|_| NotAPadValue(s.to_string())),
        }
    }
}

/// A statement that a padding region holds `value`, which no op in the graph
/// established; `origin` says who asserted it (a layer, a pass, a user hint).
#[derive(Clone, Debug, PartialEq)]
pub struct Assumption {
    /// The value the padding holds.
    pub value: f32,
    /// Who asserted it.
    pub origin: String,
}

impl Assumption {
    /// An assumption of `value`, asserted by `origin`.
    pub fn new(value: f32, origin: impl Into<String>) -> Assumption {
        Assumption {
            value,
            origin: origin.into(),
        }
    }
}

impl fmt::Display for Assumption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "assume padding == {} ({})",
            PadValue::Known(self.value),
            self.origin
        )
    }
}

/// What an op needs in the padding of one input for its logical result to be right.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Requirement {
    /// The padding is never read into a logical result.
    Any,
    /// The padding must hold this value (the identity of a reduction over it).
    Value(f32),
    /// The padding must be finite (it is multiplied by zeros of another operand).
    Finite,
    /// No padding value makes the op right: it must not run on this axis padded.
    Unsupported,
}

impl Requirement {
    /// Whether padding known to hold `have` meets the requirement.
    pub fn is_met_by(self, have: PadValue) -> bool {
        match self {
            Requirement::Any => true,
            Requirement::Value(v) => have.is(v),
            Requirement::Finite => have.is_finite(),
            Requirement::Unsupported => false,
        }
    }
}

/// The padding an op needs on each input and what its output's padding holds.
#[derive(Clone, Debug, PartialEq)]
pub struct PadFlow {
    /// What the op needs in the padding of each input.
    pub inputs: Vec<Requirement>,
    /// What the output's padding then holds.
    pub output: PadValue,
}
