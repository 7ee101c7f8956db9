//! Layout algebra and planning.
