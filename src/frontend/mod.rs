//! Model importers: each turns a file into a `Graph` with per-layer spans.
pub mod npy;
pub mod onnx;
pub mod tflite;

use std::io::Read;
use std::path::Path;

/// Opens a model, tensor or external-data file for reading. Only a regular file
/// is opened: a FIFO would block forever and a device (`/dev/zero`) never ends,
/// so those, and directories, are refused before they are opened. A file larger
/// than the memory budget (`LAYOUTOPT_MEMORY_LIMIT`) is refused before reading.
pub fn open_file(path: &Path) -> std::io::Result<std::fs::File> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a directory, FIFO or device is never read)",
        ));
    }
    check_size(meta.len())?;
    std::fs::File::open(path)
}

/// Reads a file whole, refusing what [`open_file`] refuses.
pub fn read_file(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    open_file(path)?.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// An error when `bytes` would pass the memory budget.
pub(crate) fn check_size(bytes: u64) -> std::io::Result<()> {
    let limit = crate::graph::memory_limit();
    if bytes > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} is more than the memory budget of {} (set LAYOUTOPT_MEMORY_LIMIT)",
                crate::graph::format_bytes(bytes),
                crate::graph::format_bytes(limit)
            ),
        ));
    }
    Ok(())
}
