//! Checks on messages: what an error or a command's output must mention.

/// Asserts that `text` contains each of `needles`, naming the first missing.
pub fn assert_mentions(text: &str, needles: &[&str]) {
    for n in needles {
        assert!(text.contains(n), "{n:?} is not in {text:?}");
    }
}
