//! The target of a plan: the layout family activations may move into, and the
//! vector width of this CPU that picks the block of the blocked family.

use super::{Layout, LayoutError};
use std::fmt;

/// The family of layouts the planner may move activations into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetFamily {
    /// Row-major NCHW only (nothing to plan).
    Nchw,
    /// Channels last.
    Nhwc,
    /// Channels blocked by the given width: NCHW{x}c.
    Nchwc(usize),
}

impl TargetFamily {
    /// "nchw", "nhwc", "nchwc" (block from this CPU's vector width) or "nchw{x}c".
    pub fn parse(s: &str) -> Result<TargetFamily, LayoutError> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "nchw" => Ok(TargetFamily::Nchw),
            "nhwc" => Ok(TargetFamily::Nhwc),
            "nchwc" => Ok(TargetFamily::host_blocked()),
            other => other
                .strip_prefix("nchw")
                .and_then(|r| r.strip_suffix('c'))
                .and_then(|x| x.parse::<usize>().ok())
                .filter(|&x| x > 0)
                .map(TargetFamily::Nchwc)
                .ok_or_else(|| LayoutError::Parse {
                    text: s.to_string(),
                    message: "expected nchw, nhwc, nchwc or nchw<x>c".into(),
                }),
        }
    }

    /// Channels blocked by this CPU's vector width (f32 lanes).
    pub fn host_blocked() -> TargetFamily {
        TargetFamily::Nchwc(cpu_vector_lanes())
    }

    /// The layout this family stores a logical NCHW activation in.
    pub fn activation_layout(self) -> Option<Layout> {
        match self {
            TargetFamily::Nchw => None,
            TargetFamily::Nhwc => Layout::parse("NHWC").ok(),
            TargetFamily::Nchwc(x) => Layout::parse(&format!("NCHW{x}c")).ok(),
        }
    }
}

impl std::str::FromStr for TargetFamily {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<TargetFamily, LayoutError> {
        TargetFamily::parse(s)
    }
}

impl fmt::Display for TargetFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetFamily::Nchw => write!(f, "NCHW"),
            TargetFamily::Nhwc => write!(f, "NHWC"),
            TargetFamily::Nchwc(x) => write!(f, "NCHW{x}c"),
        }
    }
}

/// f32 lanes of this CPU's widest vector unit.
pub fn cpu_vector_lanes() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return 16;
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return 8;
        }
    }
    4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn family_names_parse() {
        assert_eq!(TargetFamily::parse("NHWC").unwrap(), TargetFamily::Nhwc);
        assert_eq!(
            TargetFamily::parse("nchw16c").unwrap(),
            TargetFamily::Nchwc(16)
        );
        assert_eq!(
            TargetFamily::parse("nchwc").unwrap(),
            TargetFamily::Nchwc(cpu_vector_lanes())
        );
        assert!(TargetFamily::parse("nchw0c").is_err());
        assert!(TargetFamily::parse("blocked").is_err());
        assert_eq!(
            TargetFamily::Nchwc(8)
                .activation_layout()
                .unwrap()
                .to_string(),
            "NCHW8c"
        );
    }
}
