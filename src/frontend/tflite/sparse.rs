//! Sparse constant tensors (the `sparsity` table of a Tensor) made dense at import.
//!
//! A tensor of dense shape `[d0, .., dn-1]` may be cut into blocks along k of its
//! dimensions (`block_map[b]` names the dimension that block dimension `n + b` divides).
//! The stored values are then visited level by level in `traversal_order`: first the
//! n block-grid dimensions (a permutation of `0..n`), then the k in-block dimensions (a
//! permutation of `n..n+k`). A DENSE level visits every coordinate below its
//! `dense_size`; a SPARSE_CSR level visits, under parent position p, the coordinates
//! `array_indices[array_segments[p] .. array_segments[p + 1]]`. The leaves of that walk,
//! in order, are the buffer's values.

use super::schema::{IndexVector, SparsityParameters};

/// Why the sparse layout of a tensor cannot be made dense.
#[derive(Debug, thiserror::Error)]
pub enum SparsityError {
    #[error("traversal_order {order:?} is not a permutation of the {rank} dimensions followed by a permutation of the {blocks} block dimensions")]
    TraversalOrder {
        order: Vec<i32>,
        rank: usize,
        blocks: usize,
    },
    #[error("block_map {map:?} must name distinct dimensions below the rank {rank}")]
    BlockMap { map: Vec<i32>, rank: usize },
    #[error("dim_metadata has {found} levels, but traversal_order has {expected}")]
    LevelCount { found: usize, expected: usize },
    #[error("level {level} has format {format}; only DENSE (0) and SPARSE_CSR (1) exist")]
    Format { level: usize, format: i8 },
    #[error("block dimension {block} (level {level}) must be DENSE with a positive dense_size that divides dimension {dim} of extent {extent}; dense_size is {size}")]
    BlockSize {
        block: usize,
        level: usize,
        dim: usize,
        extent: usize,
        size: i32,
    },
    #[error("DENSE level {level} has dense_size {found}, but the dense shape gives it {expected}")]
    DenseSize {
        level: usize,
        found: i32,
        expected: usize,
    },
    #[error("SPARSE_CSR level {level} lacks array_segments or array_indices (or gives them as an unknown type)")]
    MissingArrays { level: usize },
    #[error("array_segments of level {level} are not non-decreasing, or end past its {indices} array_indices")]
    Segments { level: usize, indices: usize },
    #[error("level {level} reads array_segments entry {entry}, but it has {len}")]
    SegmentOutOfRange {
        level: usize,
        entry: usize,
        len: usize,
    },
    #[error("array_indices entry {entry} of level {level} is {index:?}, outside 0..{extent}")]
    IndexOutOfRange {
        level: usize,
        entry: usize,
        index: Option<usize>,
        extent: usize,
    },
    #[error("array_indices of level {level} do not increase within a segment (entry {entry})")]
    Unordered { level: usize, entry: usize },
    #[error("positions of level {level} overflow")]
    Positions { level: usize },
    #[error("the buffer's {bytes} bytes are not whole {elem_size}-byte elements")]
    PartialElement { bytes: usize, elem_size: usize },
    #[error("the buffer holds {values} values, but the sparse layout addresses {addressed}")]
    ValueCount { values: usize, addressed: String },
}

/// How each level of the traversal reaches its children.
enum Level<'a> {
    Dense {
        size: usize,
    },
    Sparse {
        segments: IndexVector<'a>,
        indices: IndexVector<'a>,
        size: usize,
    },
}

/// The dense bytes of a tensor of `shape` with `elem_size`-byte elements whose
/// `values` are stored as `sparsity` describes. Every index is checked; positions
/// the layout does not address are zero.
pub fn densify(
    sparsity: SparsityParameters<'_>,
    shape: &[usize],
    elem_size: usize,
    values: &[u8],
) -> Result<Vec<u8>, SparsityError> {
    let rank = shape.len();
    let order: Vec<i32> = sparsity
        .traversal_order()
        .unwrap_or_default()
        .iter()
        .collect();
    let block_map: Vec<i32> = sparsity.block_map().unwrap_or_default().iter().collect();
    let blocks = block_map.len();
    let order =
        permutation_levels(&order, rank, blocks).ok_or_else(|| SparsityError::TraversalOrder {
            order: order.clone(),
            rank,
            blocks,
        })?;
    let block_dims = distinct_below(&block_map, rank).ok_or_else(|| SparsityError::BlockMap {
        map: block_map.clone(),
        rank,
    })?;
    let meta = sparsity.dim_metadata().unwrap_or_default();
    if meta.len() != order.len() {
        return Err(SparsityError::LevelCount {
            found: meta.len(),
            expected: order.len(),
        });
    }
    // Block sizes come from the DENSE levels that traverse the inside of a block.
    let mut block_size = vec![0; blocks];
    for (level, &d) in order.iter().enumerate().skip(rank) {
        let b = d - rank;
        let (dim, m) = (block_dims[b], meta.get(level));
        let size = usize::try_from(m.dense_size()).unwrap_or(0);
        if m.format() != 0 || size == 0 || !shape[dim].is_multiple_of(size) {
            return Err(SparsityError::BlockSize {
                block: b,
                level,
                dim,
                extent: shape[dim],
                size: m.dense_size(),
            });
        }
        block_size[b] = size;
    }
    // The extent each level walks: a block-grid dimension, or a block's side.
    let mut grid = shape.to_vec();
    for (b, &dim) in block_dims.iter().enumerate() {
        grid[dim] /= block_size[b];
    }
    let levels = order
        .iter()
        .enumerate()
        .map(|(level, &d)| {
            let size = if d < rank {
                grid[d]
            } else {
                block_size[d - rank]
            };
            let m = meta.get(level);
            match m.format() {
                0 if usize::try_from(m.dense_size()) == Ok(size) => Ok(Level::Dense { size }),
                0 => Err(SparsityError::DenseSize {
                    level,
                    found: m.dense_size(),
                    expected: size,
                }),
                1 => {
                    let (Some(segments), Some(indices)) = (m.segments(), m.indices()) else {
                        return Err(SparsityError::MissingArrays { level });
                    };
                    check_segments(level, segments, indices.len())?;
                    Ok(Level::Sparse {
                        segments,
                        indices,
                        size,
                    })
                }
                format => Err(SparsityError::Format { level, format }),
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let walk = Walk {
        levels: &levels,
        order: &order,
        block_dims: &block_dims,
        block_size: &block_size,
        shape,
    };
    walk.scatter(elem_size, values)
}

/// `order` as levels: a permutation of `0..rank` then one of `rank..rank + blocks`.
fn permutation_levels(order: &[i32], rank: usize, blocks: usize) -> Option<Vec<usize>> {
    if order.len() != rank + blocks {
        return None;
    }
    let levels: Vec<usize> = order
        .iter()
        .map(|&d| usize::try_from(d).ok())
        .collect::<Option<_>>()?;
    let mut seen = vec![false; order.len()];
    for (level, &d) in levels.iter().enumerate() {
        let in_part = if level < rank { d < rank } else { d >= rank };
        if !in_part || d >= seen.len() || std::mem::replace(&mut seen[d], true) {
            return None;
        }
    }
    Some(levels)
}

/// `dims` as distinct dimensions below `rank`.
fn distinct_below(dims: &[i32], rank: usize) -> Option<Vec<usize>> {
    let dims: Vec<usize> = dims
        .iter()
        .map(|&d| usize::try_from(d).ok().filter(|&d| d < rank))
        .collect::<Option<_>>()?;
    let mut sorted = dims.clone();
    sorted.sort_unstable();
    sorted.dedup();
    (sorted.len() == dims.len()).then_some(dims)
}

/// Segments must not decrease and must stay within the level's index array.
fn check_segments(
    level: usize,
    segments: IndexVector<'_>,
    indices: usize,
) -> Result<(), SparsityError> {
    let mut last = 0;
    for i in 0..segments.len() {
        match segments.get(i) {
            Some(s) if s >= last && s <= indices => last = s,
            _ => return Err(SparsityError::Segments { level, indices }),
        }
    }
    Ok(())
}

/// The traversal of a checked sparse layout.
struct Walk<'w, 'a> {
    levels: &'w [Level<'a>],
    order: &'w [usize],
    block_dims: &'w [usize],
    block_size: &'w [usize],
    shape: &'w [usize],
}

impl Walk<'_, '_> {
    /// The positions of the children of `parent` at `level`.
    fn children(&self, level: usize, parent: usize) -> Result<(usize, usize), SparsityError> {
        match &self.levels[level] {
            // Dense positions number every coordinate under every parent.
            Level::Dense { size } => parent
                .checked_mul(*size)
                .and_then(|first| Some((first, first.checked_add(*size)?)))
                .ok_or(SparsityError::Positions { level }),
            Level::Sparse { segments, .. } => {
                let entry = |e: usize| {
                    segments.get(e).ok_or(SparsityError::SegmentOutOfRange {
                        level,
                        entry: e,
                        len: segments.len(),
                    })
                };
                Ok((entry(parent)?, entry(parent + 1)?))
            }
        }
    }

    /// The coordinate along `level` of the child at `position`.
    fn coordinate(&self, level: usize, position: usize) -> Result<usize, SparsityError> {
        match &self.levels[level] {
            Level::Dense { size } => Ok(position % size),
            Level::Sparse { indices, size, .. } => indices
                .get(position)
                .filter(|&i| i < *size)
                .ok_or(SparsityError::IndexOutOfRange {
                    level,
                    entry: position,
                    index: indices.get(position),
                    extent: *size,
                }),
        }
    }

    /// The row-major offset in the dense tensor of the leaf at `coords` (one per level,
    /// all set on the way down).
    fn dense_offset(&self, coords: &[Option<usize>]) -> usize {
        let rank = self.shape.len();
        let coord = |level: usize| coords[level].unwrap_or_default();
        let mut index = vec![0; rank];
        for (level, &d) in self.order.iter().enumerate().take(rank) {
            index[d] = coord(level);
        }
        for (level, &d) in self.order.iter().enumerate().skip(rank) {
            let b = d - rank;
            let dim = self.block_dims[b];
            index[dim] = index[dim] * self.block_size[b] + coord(level);
        }
        index
            .iter()
            .zip(self.shape)
            .fold(0, |offset, (&i, &extent)| offset * extent + i)
    }

    /// Walks the levels depth first (without recursion: a hostile rank cannot exhaust
    /// the stack) and copies each stored value to its dense place. Coordinates
    /// increase under each parent, so the walk visits at most `levels * numel` nodes.
    fn scatter(&self, elem_size: usize, values: &[u8]) -> Result<Vec<u8>, SparsityError> {
        if elem_size == 0 || !values.len().is_multiple_of(elem_size) {
            return Err(SparsityError::PartialElement {
                bytes: values.len(),
                elem_size,
            });
        }
        let numel: usize = self.shape.iter().product();
        let stored = values.len() / elem_size;
        let count_error = |addressed: String| SparsityError::ValueCount {
            values: stored,
            addressed,
        };
        let depth = self.levels.len();
        if depth == 0 {
            // A scalar: the one value.
            return match stored {
                1 => Ok(values.to_vec()),
                _ => Err(count_error("1".into())),
            };
        }
        let mut dense = vec![0u8; numel * elem_size];
        let mut written = 0;
        // Per level: the next child position, the end of the children, the
        // coordinate of the current child (`None` before the first child).
        let (mut next, mut end) = (vec![0; depth], vec![0; depth]);
        let mut coords: Vec<Option<usize>> = vec![None; depth];
        (next[0], end[0]) = self.children(0, 0)?;
        let mut level = 0;
        loop {
            if next[level] >= end[level] {
                if level == 0 {
                    break;
                }
                level -= 1;
                next[level] += 1;
                continue;
            }
            let position = next[level];
            let c = self.coordinate(level, position)?;
            if coords[level].is_some_and(|last| c <= last) {
                return Err(SparsityError::Unordered {
                    level,
                    entry: position,
                });
            }
            coords[level] = Some(c);
            if level + 1 < depth {
                level += 1;
                (next[level], end[level]) = self.children(level, position)?;
                coords[level] = None;
                continue;
            }
            if written >= stored {
                return Err(count_error(format!("more than {written}")));
            }
            let at = self.dense_offset(&coords) * elem_size;
            let from = written * elem_size;
            dense[at..at + elem_size].copy_from_slice(&values[from..from + elem_size]);
            written += 1;
            next[level] += 1;
        }
        if written != stored {
            return Err(count_error(written.to_string()));
        }
        Ok(dense)
    }
}
