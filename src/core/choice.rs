//! A word that names one of a fixed set of choices (an instruction set, a
//! convolution algorithm, an export purpose), parsed with one error.

/// A word that names none of the choices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("'{given}' is not {what} ({})", .expected.join(", "))]
pub struct UnknownChoice {
    /// The word given.
    pub given: String,
    /// What the choices are, with its article ("an instruction set").
    pub what: &'static str,
    /// The words that name a choice.
    pub expected: Vec<&'static str>,
}

/// The choice among `all` that `name` spells `s`.
pub fn parse_choice<T: Copy>(
    s: &str,
    what: &'static str,
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T, UnknownChoice> {
    all.iter()
        .copied()
        .find(|&c| name(c) == s)
        .ok_or_else(|| UnknownChoice {
            given: s.to_string(),
            what,
            expected: all.iter().map(|&c| name(c)).collect(),
        })
}
