//! Bounds on the input shapes a model will be run at
//! (`--input-shape x=1,3,32..1024,32..1024`): each dimension an extent or an
//! inclusive range. A session plans ahead at the largest shape the bounds
//! allow, so the memory budget and the plan are settled before any input
//! arrives, and refuses a shape outside them naming the input and dimension.

use super::{Dim, Interface, ShapeMismatch};
use std::collections::HashMap;
use std::fmt;

/// The extents one dimension may take: `lo..=hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimRange {
    /// The smallest extent.
    pub lo: usize,
    /// The largest extent.
    pub hi: usize,
}

impl DimRange {
    /// Exactly `n`.
    pub fn exactly(n: usize) -> DimRange {
        DimRange { lo: n, hi: n }
    }

    /// Whether `n` lies inside.
    pub fn holds(self, n: usize) -> bool {
        (self.lo..=self.hi).contains(&n)
    }
}

impl fmt::Display for DimRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.lo == self.hi {
            true => write!(f, "{}", self.lo),
            false => write!(f, "{}..{}", self.lo, self.hi),
        }
    }
}

/// Why a dimension's bounds do not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DimRangeError {
    /// Not a whole number.
    #[error("'{0}' is not a dimension's extent")]
    NotAnExtent(String),
    /// `lo..hi` with `lo > hi`.
    #[error("the range {lo}..{hi} is empty")]
    Empty {
        /// The lower end given.
        lo: usize,
        /// The upper end given.
        hi: usize,
    },
}

impl std::str::FromStr for DimRange {
    type Err = DimRangeError;
    /// `n` or `lo..hi` (both ends included, `lo <= hi`).
    fn from_str(s: &str) -> Result<DimRange, DimRangeError> {
        let extent = |t: &str| {
            (t.trim().parse::<usize>()).map_err(|_| DimRangeError::NotAnExtent(t.to_string()))
        };
        match s.split_once("..") {
            None => Ok(DimRange::exactly(extent(s)?)),
            Some((lo, hi)) => {
                let (lo, hi) = (extent(lo)?, extent(hi)?);
                if lo > hi {
                    return Err(DimRangeError::Empty { lo, hi });
                }
                Ok(DimRange { lo, hi })
            }
        }
    }
}

/// Bounds on the shapes of some graph inputs, by input name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShapeBounds(pub HashMap<String, Vec<DimRange>>);

impl ShapeBounds {
    /// Whether no input is bounded.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether some dimension takes more than one extent.
    pub fn has_ranges(&self) -> bool {
        self.0.values().flatten().any(|r| r.lo != r.hi)
    }

    /// The largest shape of each bounded input.
    pub fn upper(&self) -> HashMap<String, Vec<usize>> {
        (self.0.iter())
            .map(|(name, dims)| (name.clone(), dims.iter().map(|r| r.hi).collect()))
            .collect()
    }

    /// Checks the bounds against what the model declares: every bounded
    /// input exists, with the declared rank, and a static dimension's range
    /// holds its extent.
    pub fn check_against(&self, interface: &Interface) -> Result<(), ShapeMismatch> {
        let mut names: Vec<&String> = self.0.keys().collect();
        names.sort();
        for name in names {
            let ranges = &self.0[name];
            let Some(v) = interface.inputs.iter().find(|v| &v.name == name) else {
                return Err(ShapeMismatch::NoInput {
                    input: name.clone(),
                    inputs: interface.inputs.iter().map(|v| v.name.clone()).collect(),
                });
            };
            let Some(dims) = &v.dims else { continue };
            if dims.len() != ranges.len() {
                return Err(ShapeMismatch::BoundsRank {
                    input: name.clone(),
                    given: ranges.len(),
                    declared: dims.len(),
                });
            }
            for (axis, (d, &r)) in dims.iter().zip(ranges).enumerate() {
                if let Dim::Static(n) = *d {
                    if !r.holds(n) || r.lo != r.hi {
                        return Err(ShapeMismatch::StaticBounded {
                            input: name.clone(),
                            axis,
                            range: r.to_string(),
                            declared: n,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks shapes to be run (in the interface's input order) against the
    /// bounds.
    pub fn check(&self, interface: &Interface, shapes: &[&[usize]]) -> Result<(), ShapeMismatch> {
        (interface.inputs.iter().zip(shapes))
            .try_for_each(|(v, shape)| self.check_input(&v.name, shape))
    }

    /// Checks the shape of the input `name` against its bounds, if any.
    pub fn check_input(&self, name: &str, shape: &[usize]) -> Result<(), ShapeMismatch> {
        let Some(ranges) = self.0.get(name) else {
            return Ok(());
        };
        if ranges.len() != shape.len() {
            return Err(ShapeMismatch::BoundsRank {
                input: name.to_string(),
                given: ranges.len(),
                declared: shape.len(),
            });
        }
        match (ranges.iter().zip(shape).enumerate()).find(|(_, (r, &n))| !r.holds(n)) {
            Some((axis, (r, &given))) => Err(ShapeMismatch::OutOfBounds {
                input: name.to_string(),
                axis,
                given,
                range: r.to_string(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::DeclaredValue;

    fn interface() -> Interface {
        let dims = vec![
            Dim::Symbolic("n".into()),
            Dim::Static(3),
            Dim::Symbolic("h".into()),
            Dim::Unknown,
        ];
        Interface {
            inputs: vec![DeclaredValue {
                name: "x".into(),
                dtype: None,
                dims: Some(dims),
            }],
            outputs: vec![],
        }
    }

    fn bounds(dims: &str) -> ShapeBounds {
        let ranges = dims.split(',').map(|d| d.parse().unwrap()).collect();
        ShapeBounds(HashMap::from([("x".to_string(), ranges)]))
    }

    #[test]
    fn ranges_parse_and_print() {
        assert_eq!("7".parse(), Ok(DimRange::exactly(7)));
        assert_eq!("32..1024".parse(), Ok(DimRange { lo: 32, hi: 1024 }));
        assert_eq!(DimRange { lo: 32, hi: 1024 }.to_string(), "32..1024");
        let empty = "9..3".parse::<DimRange>().unwrap_err();
        assert_eq!(empty.to_string(), "the range 9..3 is empty");
        assert!("3..".parse::<DimRange>().is_err());
        assert!("x".parse::<DimRange>().is_err());
    }

    /// Shapes inside the bounds pass; one outside names the input, the
    /// dimension and the bounds.
    #[test]
    fn shapes_are_checked_against_the_bounds() {
        let b = bounds("1..4,3,32..1024,32..1024");
        let i = interface();
        b.check_against(&i).unwrap();
        assert_eq!(b.upper()["x"], vec![4, 3, 1024, 1024]);
        assert!(b.has_ranges());
        b.check(&i, &[&[1, 3, 32, 1024]]).unwrap();
        let e = b.check(&i, &[&[2, 3, 2000, 64]]).unwrap_err().to_string();
        assert_eq!(
            e,
            "input 'x': dimension 2 is 2000, outside the bounds 32..1024 given for it"
        );
        let e = b.check_input("x", &[1, 3, 64]).unwrap_err().to_string();
        assert!(e.contains("bounds are given for 4 dimensions"), "{e}");
    }

    /// Bounds that do not fit the model are refused before anything runs.
    #[test]
    fn bounds_must_fit_what_the_model_declares() {
        let i = interface();
        let e = bounds("1,3,8").check_against(&i).unwrap_err().to_string();
        assert!(e.contains("bounds are given for 3 dimensions"), "{e}");
        let e = bounds("1,2..3,8,8")
            .check_against(&i)
            .unwrap_err()
            .to_string();
        assert!(e.contains("dimension 1 is bounded by 2..3"), "{e}");
        let mut other = bounds("1,3,8,8");
        other.0.insert("y".into(), vec![DimRange::exactly(1)]);
        let e = other.check_against(&i).unwrap_err().to_string();
        assert!(e.contains("'y', which is no input"), "{e}");
    }
}
