//! Data movement on physical buffers: layout transforms, transposes, slices,
//! pads and concatenations as gathers, and row lookups.

use super::simd::ELEMENTS_PER_TASK;
use super::KernelError;
use crate::core::par;
use crate::layout::cost::same_bytes;
use crate::layout::Layout;

/// A data movement (layout transform, transpose, slice, pad, concat, ...) as
/// runs: each fills consecutive output elements from elements of one input a
/// fixed stride apart, or with the fill value (padding), and repeats that a
/// number of times, each time from a fixed step further in the input (the
/// rows of a transpose, the elements an upsampling repeats). Most movements
/// are few runs, so the copy costs a loop per run, not a lookup per element;
/// any movement takes at most one run per two elements.
pub struct Gather {
    runs: Vec<Run>,
    /// The first run of each parallel task (tasks cover about
    /// `ELEMENTS_PER_TASK` elements; no run is longer).
    tasks: Vec<usize>,
    /// Output elements.
    len: usize,
    /// Per input, one past the last element read.
    src_ends: Vec<usize>,
    fill: f32,
}

/// Most inputs a gather reads (they are passed without allocating).
pub const MAX_GATHER_INPUTS: usize = 32;

/// For `k` in `0..count`, output elements `dst + k * len ..` (`len` of them)
/// take elements `src + k * step + j * stride` of input `input` (`j` in
/// `0..len`), or the fill when `src` is `PAD` (then `count` is 1).
#[derive(Clone, Copy, Debug)]
struct Run {
    dst: u32,
    src: u32,
    len: u32,
    stride: i32,
    input: u32,
    count: u32,
    step: i32,
}

impl Run {
    fn elements(&self) -> usize {
        self.len as usize * self.count as usize
    }

    /// Whether output element `dst + e` is input element `src + e` for every `e`.
    fn is_contiguous(&self) -> bool {
        self.src != PAD
            && (self.stride == 1 || self.len <= 1)
            && (self.step == self.len as i32 || self.count <= 1)
    }

    /// One past the last input element read (0 for padding).
    fn src_end(&self) -> usize {
        if self.src == PAD || self.elements() == 0 {
            return 0;
        }
        let along = (self.len as i64 - 1) * self.stride as i64;
        let across = (self.count as i64 - 1) * self.step as i64;
        (self.src as i64 + along.max(0) + across.max(0)) as usize + 1
    }

    /// `self` repeated once more by `next`, when `next` continues it.
    fn extend(&mut self, next: &Run) -> bool {
        let same_shape = self.src != PAD
            && next.src != PAD
            && (self.len, self.stride, self.input) == (next.len, next.stride, next.input)
            && self.elements() + next.elements() <= ELEMENTS_PER_TASK;
        let last = self.src as i64 + (self.count as i64 - 1) * self.step as i64;
        let Ok(step) = i32::try_from(next.src as i64 - last) else {
            return false;
        };
        if !same_shape || (self.count > 1 && step != self.step) {
            return false;
        }
        self.step = step;
        self.count += 1;
        true
    }

    /// `self` made longer by `next`, when `next` goes on from where it ends
    /// (the next sources at its stride, or more fill) within a task's worth
    /// of elements.
    fn lengthen(&mut self, next: &Run) -> bool {
        let single = self.count == 1 && next.count == 1 && self.input == next.input;
        let fits = self.elements() + next.elements() <= ELEMENTS_PER_TASK;
        let goes_on = match (self.src, next.src) {
            (PAD, PAD) => true,
            (PAD, _) | (_, PAD) => false,
            (a, b) => {
                self.stride == next.stride
                    && b as i64 == a as i64 + self.len as i64 * self.stride as i64
            }
        };
        if !(single && fits && goes_on) {
            return false;
        }
        self.len += next.len;
        true
    }
}

/// Output elements `dst..dst + len` are elements `src + j * stride` (`j` in
/// `0..len`) of input `input`: a piece of a data movement, as the compiler
/// finds it (`Gather::from_rows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The first output element.
    pub dst: usize,
    /// Which input it reads.
    pub input: usize,
    /// The input element of the first output element.
    pub src: usize,
    /// Output elements.
    pub len: usize,
    /// Input elements from one output element to the next.
    pub stride: isize,
}

impl Row {
    /// Output elements `0..len` are the elements from `offset` on of input
    /// 0: all of a movement that is a view of its one input.
    pub fn view(len: usize, offset: usize) -> Row {
        Row {
            dst: 0,
            input: 0,
            src: offset,
            len,
            stride: 1,
        }
    }

    /// The input element the row's `j`-th output element holds.
    pub fn source(&self, j: usize) -> usize {
        (self.src as isize + j as isize * self.stride) as usize
    }

    /// `self` made longer by `next`, when `next` goes on from where it ends
    /// at one stride (a row of one element takes the other's, or the step
    /// between them) that fits an i32.
    fn join(&mut self, next: &Row) -> bool {
        let stride = match (self.len, next.len) {
            (1, 1) => next.src as isize - self.src as isize,
            (1, _) => next.stride,
            _ => self.stride,
        };
        let goes_on = self.input == next.input
            && self.dst + self.len == next.dst
            && (next.len == 1 || next.stride == stride)
            && self.src as isize + self.len as isize * stride == next.src as isize
            && i32::try_from(stride).is_ok();
        if goes_on {
            self.len += next.len;
            self.stride = stride;
        }
        goes_on
    }
}

/// The rows input `input` gives an output whose element at index tuple `i`
/// lies at the sum over the axes `a` of `out[a][i_a]`, and holds input
/// offset the sum of `read[a][i_a]` when every one of those is `Some`: one
/// per stretch of the axis whose output offsets step by one (the physically
/// innermost: a blocked layout's channels within a block) along which the
/// input offsets keep one stride, per index of the other axes, joined where
/// they go on. A plain copy or transpose is at most one row per line, where
/// a table of sources took a look per element.
pub fn rows_of_axes(out: &[Vec<usize>], read: &[Vec<Option<u32>>], input: usize) -> Vec<Row> {
    let rank = out.len();
    let Some(along) = (0..rank)
        .rev()
        .find(|&a| out[a].len() >= 2 && out[a][1] == out[a][0] + 1)
        .or(rank.checked_sub(1))
    else {
        // A scalar: its one element.
        return vec![Row {
            input,
            ..Row::view(1, 0)
        }];
    };
    let (o, r) = (&out[along], &read[along]);
    // The stretches along the axis: (output offset, input offset, length,
    // stride).
    let step = |k: usize| match (r[k], r.get(k + 1)) {
        (Some(a), Some(&Some(b))) if o[k + 1] == o[k] + 1 => Some(b as isize - a as isize),
        _ => None,
    };
    let mut stretches = vec![];
    let mut j = 0;
    while j < o.len() {
        let Some(first) = r[j] else {
            j += 1;
            continue;
        };
        let stride = step(j).unwrap_or(1);
        let mut end = j + 1;
        while end < o.len() && step(end - 1) == Some(stride) {
            end += 1;
        }
        stretches.push((o[j], first as usize, end - j, stride));
        j = end;
    }
    let others: Vec<usize> = (0..rank).filter(|&a| a != along).collect();
    let extents: Vec<usize> = others.iter().map(|&a| out[a].len()).collect();
    // Per index of the other axes that reads the input: output and input
    // offsets.
    let mut bases = vec![];
    let mut idx = vec![0; others.len()];
    for _ in 0..crate::core::numel(&extents) {
        let dst: usize = others.iter().zip(&idx).map(|(&a, &i)| out[a][i]).sum();
        let src: Option<usize> = (others.iter().zip(&idx))
            .map(|(&a, &i)| read[a][i].map(|o| o as usize))
            .sum();
        if let Some(src) = src {
            bases.push((dst, src));
        }
        crate::core::next_index(&mut idx, &extents);
    }
    // Stretch by stretch, so that a stretch's rows at consecutive indices of
    // the other axes join where both offsets go on (a channel block over
    // its pixels, in blocked layouts on both sides): few rows, in output
    // order where the stretches lie further apart than the other axes reach
    // (a blocked output). Index by index where that is the output order
    // instead (a blocked input read into a channels-last output: the
    // stretches are one pixel's blocks). Else `Gather::from_rows` sorts them.
    let stretch_span = match (stretches.first(), stretches.last()) {
        (Some(first), Some(last)) => last.0 + last.2 - first.0,
        _ => 0,
    };
    let index_major = apart(stretches.iter().map(|s| (s.0, s.2)))
        && apart(bases.iter().map(|b| (b.0, stretch_span)));
    let row = |&(d, s, len, stride): &(usize, usize, usize, isize),
               &(dst, src): &(usize, usize)| Row {
        dst: dst + d,
        input,
        src: src + s,
        len,
        stride,
    };
    let ordered: Box<dyn Iterator<Item = Row>> = if index_major {
        Box::new((bases.iter()).flat_map(|b| stretches.iter().map(move |s| row(s, b))))
    } else {
        Box::new((stretches.iter()).flat_map(|s| bases.iter().map(move |b| row(s, b))))
    };
    let mut rows: Vec<Row> = vec![];
    for row in ordered {
        if !rows.last_mut().is_some_and(|last| last.join(&row)) {
            rows.push(row);
        }
    }
    rows
}

/// Whether each of the pieces `(start, length)` starts where the one before
/// ends or after it.
fn apart(mut pieces: impl Iterator<Item = (usize, usize)>) -> bool {
    let Some(mut end) = pieces.next().map(|(start, len)| start + len) else {
        return true;
    };
    pieces.all(|(start, len)| {
        let after = start >= end;
        end = start + len;
        after
    })
}

/// Appends output elements `dst..dst + len`, taken as `row` says from its
/// start (the fill where `row` is `None`), to `runs` (which end at `dst`):
/// runs of at most `ELEMENTS_PER_TASK` elements, each merged into the one
/// before where it goes on from it or repeats it.
fn push_row(runs: &mut Vec<Run>, dst: usize, len: usize, row: Option<&Row>) {
    let mut done = 0;
    while done < len {
        let n = (len - done).min(ELEMENTS_PER_TASK);
        let run = Run {
            dst: (dst + done) as u32,
            src: row.map_or(PAD, |r| r.source(done) as u32),
            len: n as u32,
            stride: row.map_or(0, |r| r.stride as i32),
            input: row.map_or(0, |r| r.input as u32),
            count: 1,
            step: 0,
        };
        let merged = runs
            .last_mut()
            .is_some_and(|last| last.lengthen(&run) || last.extend(&run));
        if !merged {
            runs.push(run);
        }
        done += n;
    }
}

const PAD: u32 = u32::MAX;

impl Gather {
    /// The input offset `k` when output element `e` is input element `e + k`
    /// for every `e`: the movement is a contiguous piece of its input.
    pub fn view_offset(&self) -> Option<usize> {
        (self.src_ends.len() == 1).then_some(())?;
        let first = self.runs.first()?;
        let k = first.src.checked_sub(first.dst)?;
        let covered: usize = self.runs.iter().map(Run::elements).sum();
        let contiguous = self
            .runs
            .iter()
            .all(|r| r.is_contiguous() && r.src.checked_sub(r.dst) == Some(k));
        (contiguous && covered == self.len).then_some(k as usize)
    }

    /// The gather from `from` to `to` for a logical tensor of shape `logical`.
    pub fn new(
        from: &Layout,
        to: &Layout,
        logical: &[usize],
        fill: f32,
    ) -> Result<Gather, KernelError> {
        Gather::reshape((from, logical), (to, logical), fill)
    }

    /// The gather of a reshape from logical shape `from.1` stored in layout
    /// `from.0` to shape `to.1` in `to.0`: the k-th element in row-major order
    /// of one is the k-th of the other.
    pub fn reshape(
        (from, from_shape): (&Layout, &[usize]),
        (to, to_shape): (&Layout, &[usize]),
        fill: f32,
    ) -> Result<Gather, KernelError> {
        let numel = crate::graph::numel(from_shape);
        if numel != crate::graph::numel(to_shape) {
            return Err(KernelError::Reshape {
                from: from_shape.to_vec(),
                to: to_shape.to_vec(),
            });
        }
        let phys_to = to.physical_shape(to_shape)?;
        let phys_from = from.physical_shape(from_shape)?;
        let elements = phys_from.iter().product::<usize>();
        if elements >= PAD as usize {
            return Err(KernelError::TooLarge { elements });
        }
        // Layouts that put every element at the same offset (a relabelling),
        // or row-major data reshaped: the identity, with no table to build.
        let identity = match from_shape == to_shape {
            true => same_bytes(from, to, from_shape),
            false => from.is_identity() && to.is_identity(),
        };
        let too_large = KernelError::TooLarge { elements };
        if identity {
            return Gather::shifted(elements, 0, fill).ok_or(too_large);
        }
        let len = phys_to.iter().product();
        // A layout transform: the rows of its axes' offset tables.
        if from_shape == to_shape {
            let read: Vec<Vec<Option<u32>>> = (from.offset_tables(from_shape)?.iter())
                .map(|t| t.iter().map(|&o| Some(o as u32)).collect())
                .collect();
            let rows = rows_of_axes(&to.offset_tables(to_shape)?, &read, 0);
            return Gather::from_rows(rows, 1, len, fill).ok_or(too_large);
        }
        let mut src = vec![PAD; len];
        let pairs = to
            .row_major_offsets(to_shape)?
            .zip(from.row_major_offsets(from_shape)?);
        for (to_offset, from_offset) in pairs {
            src[to_offset] = from_offset as u32;
        }
        Gather::from_sources(src, fill).ok_or(too_large)
    }

    /// The gather taking output element `i` from input element `src[i]`, or
    /// `fill` where `src[i]` is `u32::MAX`; `None` if it has `u32::MAX`
    /// elements or more.
    pub fn from_sources(src: Vec<u32>, fill: f32) -> Option<Gather> {
        Gather::from_inputs(src, &[0], fill)
    }

    /// The gather from several inputs: `src[i]` indexes their elements one
    /// input after another, input `k`'s first element at `starts[k]`
    /// (`starts[0]` is 0, at most [`MAX_GATHER_INPUTS`] of them). The
    /// sources are cut into rows where their stride changes.
    pub fn from_inputs(src: Vec<u32>, starts: &[usize], fill: f32) -> Option<Gather> {
        let len = src.len();
        // A stride joins two sources of one input (`within` its positions)
        // that fit an i32 step.
        let step = |a: u32, b: u32, within: &std::ops::Range<u32>| {
            (within.contains(&b))
                .then(|| i32::try_from(b as i64 - a as i64).ok())
                .flatten()
        };
        let mut rows = vec![];
        let mut i = 0;
        while i < len {
            let first = src[i];
            if first == PAD {
                i += 1;
                continue;
            }
            let input = starts.partition_point(|&b| b <= first as usize) - 1;
            let within = match starts.get(input + 1) {
                Some(&end) => starts[input] as u32..end as u32,
                None => starts[input] as u32..PAD,
            };
            let stride = (src.get(i + 1))
                .and_then(|&next| step(first, next, &within))
                .unwrap_or(1);
            let (mut end, mut last) = (i + 1, first);
            while end < len && step(last, src[end], &within) == Some(stride) {
                last = src[end];
                end += 1;
            }
            rows.push(Row {
                dst: i,
                input,
                src: first as usize - starts[input],
                len: end - i,
                stride: stride as isize,
            });
            i = end;
        }
        Gather::from_rows(rows, starts.len(), len, fill)
    }

    /// The gather writing `rows` (disjoint, in any order) into an output of
    /// `len` elements, the fill wherever no row writes, from `inputs`
    /// inputs. `None` when rows overlap or pass `len`, or an offset or
    /// length does not fit below `u32::MAX` (or a stride an i32).
    pub fn from_rows(mut rows: Vec<Row>, inputs: usize, len: usize, fill: f32) -> Option<Gather> {
        if len >= PAD as usize {
            return None;
        }
        rows.retain(|r| r.len > 0);
        rows.sort_unstable_by_key(|r| r.dst);
        let mut runs: Vec<Run> = vec![];
        let mut at = 0;
        for r in &rows {
            let last = r.src as i64 + (r.len as i64 - 1) * r.stride as i64;
            let fits = r.dst >= at
                && r.input < inputs
                && r.src < PAD as usize
                && (0..PAD as i64).contains(&last)
                && i32::try_from(r.stride).is_ok();
            if !fits {
                return None;
            }
            push_row(&mut runs, at, r.dst - at, None);
            push_row(&mut runs, r.dst, r.len, Some(r));
            at = r.dst + r.len;
        }
        if at > len {
            return None;
        }
        push_row(&mut runs, at, len - at, None);
        let mut src_ends = vec![0; inputs];
        for r in &runs {
            let input = &mut src_ends[r.input as usize];
            *input = r.src_end().max(*input);
        }
        Some(Gather {
            tasks: tasks_of(&runs),
            runs,
            len,
            src_ends,
            fill,
        })
    }

    /// The gather whose output element `i` is element `offset + i` of its
    /// one input (`view_offset` is `offset`); `None` unless `offset + len`
    /// fits below `u32::MAX`.
    pub fn shifted(len: usize, offset: u32, fill: f32) -> Option<Gather> {
        Gather::from_rows(vec![Row::view(len, offset as usize)], 1, len, fill)
    }

    /// The output offset `k` when the one input, all `input_len` elements of
    /// it, is output elements `k..k + input_len` and every other output
    /// element is fill (a zero Pad of whole channel blocks, batch 1): the
    /// input can be computed in place there, leaving the fill to write.
    pub fn placed_input(&self, input_len: usize) -> Option<usize> {
        (self.src_ends[..] == [input_len]).then_some(())?;
        let mut sources = self.runs.iter().filter(|r| r.src != PAD).peekable();
        let first = sources.peek()?;
        let k = first.dst.checked_sub(first.src)?;
        let mut covered = 0;
        for r in sources {
            if !r.is_contiguous() || r.dst.checked_sub(r.src) != Some(k) {
                return None;
            }
            covered += r.elements();
        }
        // The runs write disjoint outputs, so they read disjoint inputs.
        (covered == input_len).then_some(k as usize)
    }

    /// The fill alone, reading no input: what is left of the gather once its
    /// input is computed in place (see `placed_input`).
    pub fn fill_only(&self) -> Gather {
        let runs: Vec<Run> = self.runs.iter().filter(|r| r.src == PAD).copied().collect();
        Gather {
            tasks: tasks_of(&runs),
            runs,
            len: self.len,
            src_ends: vec![],
            fill: self.fill,
        }
    }

    /// Output elements the fill writes.
    pub fn filled(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| r.src == PAD)
            .map(Run::elements)
            .sum()
    }

    /// Whether the gather moves nothing: the output is the input as it is.
    pub fn is_copy(&self, input_len: usize) -> bool {
        self.len == input_len
            && self.src_ends.len() == 1
            && self
                .runs
                .iter()
                .all(|r| r.is_contiguous() && r.src == r.dst)
    }

    /// Copies the inputs `xs` into `y` run by run, filling padding; the runs
    /// are split over the threads.
    pub fn run(&self, xs: &[&[f32]], y: &mut [f32]) -> Result<(), KernelError> {
        let fits = xs.len() == self.src_ends.len()
            && xs
                .iter()
                .zip(&self.src_ends)
                .all(|(x, &end)| x.len() >= end);
        if y.len() != self.len || !fits {
            return Err(KernelError::Buffers {
                kernel: "gather",
                given: xs.iter().map(|x| x.len()).chain([y.len()]).collect(),
                expected: self.src_ends.iter().copied().chain([self.len]).collect(),
            });
        }
        let y_at = y.as_mut_ptr() as usize;
        par::for_each(self.tasks.len(), |t| {
            let end = self.tasks.get(t + 1).copied().unwrap_or(self.runs.len());
            for r in &self.runs[self.tasks[t]..end] {
                // SAFETY: the runs cover disjoint parts of `y` (checked to be
                // `len` long), so tasks never write the same element.
                let out = unsafe {
                    std::slice::from_raw_parts_mut(
                        (y_at as *mut f32).add(r.dst as usize),
                        r.elements(),
                    )
                };
                match r.src {
                    PAD => out.fill(self.fill),
                    // SAFETY: `fits` checked that the input holds every element the run reads.
                    _ => unsafe { copy_run(r, xs[r.input as usize], out) },
                }
            }
        });
        Ok(())
    }
}

/// The first run of each parallel task: tasks cover about
/// `ELEMENTS_PER_TASK` output elements.
fn tasks_of(runs: &[Run]) -> Vec<usize> {
    let mut tasks = vec![];
    let mut covered = 0;
    for (k, r) in runs.iter().enumerate() {
        if k == 0 || r.dst as usize >= covered + ELEMENTS_PER_TASK {
            tasks.push(k);
            covered = r.dst as usize;
        }
    }
    tasks
}

/// The elements of run `r` (not padding) from `x` into `out`.
///
/// # Safety
/// `x` must hold `r.src_end()` elements and `out` `r.elements()`.
unsafe fn copy_run(r: &Run, x: &[f32], out: &mut [f32]) {
    let (len, src) = (r.len as usize, r.src as isize);
    let x = x.as_ptr();
    let at = |k: usize| x.offset(src + k as isize * r.step as isize);
    match (r.stride, r.step) {
        (1, _) => {
            for (k, o) in out.chunks_exact_mut(len).enumerate() {
                o.copy_from_slice(std::slice::from_raw_parts(at(k), len));
            }
        }
        // An upsampling: each input element repeated `len` times.
        (0, 1) if len == 2 => {
            let from = std::slice::from_raw_parts(at(0), r.count as usize);
            for (o, &v) in out.chunks_exact_mut(2).zip(from) {
                o.copy_from_slice(&[v, v]);
            }
        }
        (0, _) => {
            for (k, o) in out.chunks_exact_mut(len).enumerate() {
                o.fill(*at(k));
            }
        }
        // A transpose: consecutive runs read neighbouring columns.
        (stride, 1) => transpose(at(0), stride as isize, (len, r.count as usize), out),
        (stride, _) => {
            for (k, o) in out.chunks_exact_mut(len).enumerate() {
                let from = at(k);
                for (j, v) in o.iter_mut().enumerate() {
                    *v = *from.offset(j as isize * stride as isize);
                }
            }
        }
    }
}

/// Side of the square tiles a transpose moves at a time.
const TILE: usize = 16;

/// `out[k * len + j] = x[k + j * stride]` for `j < len`, `k < count`, in
/// square tiles, each read along the input's rows and written along the
/// output's (few cache lines each); a whole tile through registers where
/// the CPU has AVX-512.
///
/// # Safety
/// `x` must hold every element read and `out` `len * count` elements.
unsafe fn transpose(x: *const f32, stride: isize, (len, count): (usize, usize), out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    let avx512 = std::arch::is_x86_feature_detected!("avx512f");
    for k0 in (0..count).step_by(TILE) {
        for j0 in (0..len).step_by(TILE) {
            let from = x.offset(k0 as isize + j0 as isize * stride);
            let to = out.as_mut_ptr().add(k0 * len + j0);
            #[cfg(target_arch = "x86_64")]
            if avx512 && k0 + TILE <= count && j0 + TILE <= len {
                tile_avx512(from, stride, to, len);
                continue;
            }
            for j in 0..TILE.min(len - j0) {
                let row = from.offset(j as isize * stride);
                for k in 0..TILE.min(count - k0) {
                    *to.add(k * len + j) = *row.add(k);
                }
            }
        }
    }
}

/// One 16 x 16 tile of [`transpose`]: 16 input rows `stride` apart into 16
/// output rows `pitch` apart, by interleaving elements, then pairs, then
/// 128-bit quarters, then halves.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(x: *const f32, stride: isize, y: *mut f32, pitch: usize) {
    use std::arch::x86_64::*;
    let mut r = [_mm512_setzero_ps(); TILE];
    for (j, v) in r.iter_mut().enumerate() {
        *v = _mm512_loadu_ps(x.offset(j as isize * stride));
    }
    // In each 128-bit quarter: rows 2i and 2i + 1 interleaved.
    let mut t = r;
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4g + c], quarter q: rows 4g..4g + 4 of column 4q + c.
    let mut u = t;
    for g in 0..4 {
        let [a0, a1, b0, b1] = [t[4 * g], t[4 * g + 1], t[4 * g + 2], t[4 * g + 3]];
        for (i, (a, b)) in [(a0, b0), (a1, b1)].into_iter().enumerate() {
            let (a, b) = (_mm512_castps_pd(a), _mm512_castps_pd(b));
            u[4 * g + 2 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
            u[4 * g + 2 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        }
    }
    // v[8h + c] the even quarters of u[8h + c] and u[8h + 4 + c],
    // v[8h + 4 + c] the odd ones.
    let mut v = u;
    for h in 0..2 {
        for c in 0..4 {
            let (a, b) = (u[8 * h + c], u[8 * h + 4 + c]);
            v[8 * h + c] = _mm512_shuffle_f32x4::<0x88>(a, b);
            v[8 * h + 4 + c] = _mm512_shuffle_f32x4::<0xdd>(a, b);
        }
    }
    // Column 4q + c: quarter q of each of the four row groups.
    for q in 0..2 {
        for c in 0..4 {
            let (a, b) = (v[4 * q + c], v[8 + 4 * q + c]);
            let low = _mm512_shuffle_f32x4::<0x88>(a, b);
            let high = _mm512_shuffle_f32x4::<0xdd>(a, b);
            _mm512_storeu_ps(y.add((4 * q + c) * pitch), low);
            _mm512_storeu_ps(y.add((4 * q + 8 + c) * pitch), high);
        }
    }
}

/// Checks run-time indices against the extent of the axis they pick along,
/// negative ones counting from its end.
fn within_axis(indices: &[i64], extent: usize) -> Result<(), KernelError> {
    let range = -(extent as i64)..extent as i64;
    match indices.iter().find(|i| !range.contains(i)) {
        Some(&index) => Err(KernelError::Index { index, extent }),
        None => Ok(()),
    }
}

/// Gather along one axis by run-time indices: data viewed as
/// `[outer][extent][inner]`, each index picks an `inner`-long row.
#[derive(Clone, Debug)]
pub struct Rows {
    /// Product of the extents before the axis.
    pub outer: usize,
    /// Extent of the gathered axis.
    pub extent: usize,
    /// Product of the extents after the axis.
    pub inner: usize,
}

impl Rows {
    /// Copies the picked rows of `x` into `y`, split over the threads in
    /// pieces of the output (a long row is cut, short ones are grouped); an
    /// index outside the axis (after negative indices count from the end) is
    /// an error.
    pub fn run<T: Copy + Send + Sync>(
        &self,
        x: &[T],
        indices: &[i64],
        y: &mut [T],
    ) -> Result<(), KernelError> {
        within_axis(indices, self.extent)?;
        let (extent, inner) = (self.extent as i64, self.inner);
        let rows = self.outer * indices.len();
        if y.len() != rows * inner || x.len() < self.outer * self.extent * inner {
            return Err(KernelError::Buffers {
                kernel: "row gather",
                given: vec![x.len(), y.len()],
                expected: vec![self.outer * self.extent * inner, rows * inner],
            });
        }
        // Where output row `r` starts in `x`.
        let source = |r: usize| {
            let (o, i) = (r / indices.len(), indices[r % indices.len()]);
            (o * self.extent + i.rem_euclid(extent) as usize) * inner
        };
        par::for_each_chunk_mut(y, ELEMENTS_PER_TASK, |t, mut piece| {
            let mut at = t * ELEMENTS_PER_TASK;
            while !piece.is_empty() {
                let within = at % inner;
                let n = (inner - within).min(piece.len());
                let from = source(at / inner) + within;
                let (head, rest) = piece.split_at_mut(n);
                head.copy_from_slice(&x[from..from + n]);
                (piece, at) = (rest, at + n);
            }
        });
        Ok(())
    }
}

/// GatherElements by run-time indices: each output element is the element of
/// the data at the same position but along `axis`, where the index tensor (of
/// the output's shape, no larger than the data's on the other axes) says.
#[derive(Clone, Debug)]
pub struct Elements {
    /// The data's shape.
    pub data: Vec<usize>,
    /// The indices' shape, which is the output's.
    pub indices: Vec<usize>,
    /// The indexed axis.
    pub axis: usize,
}

impl Elements {
    /// Fills `y` with the picked elements of `x`; an index outside the axis
    /// (after negative indices count from the end) is an error.
    pub fn run<T: Copy>(&self, x: &[T], indices: &[i64], y: &mut [T]) -> Result<(), KernelError> {
        let extent = self.data[self.axis];
        let n = crate::core::numel(&self.indices);
        if x.len() != crate::core::numel(&self.data) || indices.len() != n || y.len() != n {
            return Err(KernelError::Buffers {
                kernel: "element gather",
                given: vec![x.len(), indices.len(), y.len()],
                expected: vec![crate::core::numel(&self.data), n, n],
            });
        }
        within_axis(indices, extent)?;
        let strides = crate::core::strides(&self.data);
        let step = strides[self.axis];
        // The data offset of the current position with 0 along the axis.
        let (mut at, mut base) = (vec![0; self.indices.len()], 0usize);
        for (k, (out, &i)) in y.iter_mut().zip(indices).enumerate() {
            *out = x[base + (i.rem_euclid(extent as i64) as usize) * step];
            if k + 1 == n {
                break;
            }
            // The next position: the last axis that does not wrap moves on.
            for a in (0..at.len()).rev() {
                at[a] += 1;
                if a != self.axis {
                    base += strides[a];
                }
                if at[a] < self.indices[a] {
                    break;
                }
                if a != self.axis {
                    base -= strides[a] * at[a];
                }
                at[a] = 0;
            }
        }
        Ok(())
    }
}

/// GatherND by run-time indices: each index tuple picks a slice of data.
#[derive(Clone, Debug)]
pub struct Tuples {
    /// The op (its batch axes).
    pub op: crate::ops::GatherNd,
    /// The data's shape.
    pub data: Vec<usize>,
    /// The indices' shape, the tuples along its last axis.
    pub indices: Vec<usize>,
}

impl Tuples {
    /// Fills `y` with the slices of `x` the tuples pick; an index outside its
    /// axis (after negative indices count from the end) is an error.
    pub fn run<T: Copy>(&self, x: &[T], indices: &[i64], y: &mut [T]) -> Result<(), KernelError> {
        let (data_len, index_len) = (
            crate::core::numel(&self.data),
            crate::core::numel(&self.indices),
        );
        let mismatch = |out_len| KernelError::Buffers {
            kernel: "tuple gather",
            given: vec![x.len(), indices.len(), y.len()],
            expected: vec![data_len, index_len, out_len],
        };
        if x.len() != data_len || indices.len() != index_len {
            return Err(mismatch(y.len()));
        }
        let (starts, slice) = (self.op.slices(&self.data, &self.indices, indices))
            .map_err(|e| KernelError::Value(e.to_string()))?;
        if y.len() != starts.len() * slice {
            return Err(mismatch(starts.len() * slice));
        }
        for (out, &s) in y.chunks_exact_mut(slice.max(1)).zip(&starts) {
            out.copy_from_slice(&x[s..s + slice]);
        }
        Ok(())
    }
}

/// A gather by run-time indices: whole rows along an axis, single elements,
/// or the slices index tuples name.
#[derive(Clone, Debug)]
pub enum Picking {
    /// Gather: each index picks a row.
    Rows(Rows),
    /// GatherElements: each index picks one element.
    Elements(Elements),
    /// GatherND: each index tuple picks a slice.
    Tuples(Tuples),
}

impl Picking {
    /// Fills `y` with what `indices` pick from `x`.
    pub fn run<T: Copy + Send + Sync>(
        &self,
        x: &[T],
        indices: &[i64],
        y: &mut [T],
    ) -> Result<(), KernelError> {
        match self {
            Picking::Rows(r) => r.run(x, indices, y),
            Picking::Elements(e) => e.run(x, indices, y),
            Picking::Tuples(t) => t.run(x, indices, y),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shifted gather (one row) is the one its sources give, run for run.
    #[test]
    fn a_shift_has_the_runs_of_its_sources() {
        for len in [0, 1, 7, ELEMENTS_PER_TASK, 3 * ELEMENTS_PER_TASK + 5] {
            for offset in [0, 3, 1000] {
                let shifted = Gather::shifted(len, offset, 0.0).unwrap();
                let sources: Vec<u32> = (0..len as u32).map(|i| offset + i).collect();
                let table = Gather::from_inputs(sources, &[0], 0.0).unwrap();
                let at = format!("len {len} offset {offset}");
                assert_eq!(
                    format!("{:?}", shifted.runs),
                    format!("{:?}", table.runs),
                    "{at}"
                );
                assert_eq!(shifted.tasks, table.tasks, "{at}");
                assert_eq!(shifted.src_ends, table.src_ends, "{at}");
                let view = (len > 0).then_some(offset as usize);
                assert_eq!(shifted.view_offset(), view, "{at}");
            }
        }
    }

    /// A layout transform's rows come in output order, joined where they go
    /// on: block by block into a blocked output (a copy is one row), pixel by
    /// pixel into a channels-last one.
    #[test]
    fn transform_rows_come_in_output_order() {
        let shape = [1, 16, 3, 5];
        let rows = |from: &str, to: &str| {
            let tables = |l: &str| Layout::parse(l).unwrap().offset_tables(&shape).unwrap();
            let read: Vec<Vec<Option<u32>>> = (tables(from).iter())
                .map(|t| t.iter().map(|&o| Some(o as u32)).collect())
                .collect();
            rows_of_axes(&tables(to), &read, 0)
        };
        let in_order = |rows: &[Row]| apart(rows.iter().map(|r| (r.dst, r.len)));
        assert_eq!(rows("NCHW8c", "NCHW8c"), [Row::view(16 * 15, 0)]);
        let blocked = rows("NCHW", "NCHW8c");
        assert_eq!(blocked.len(), 2 * 15, "{blocked:?}");
        assert!(in_order(&blocked), "{blocked:?}");
        let channels_last = rows("NCHW8c", "NHWC");
        assert_eq!(channels_last.len(), 2 * 15, "{channels_last:?}");
        assert!(in_order(&channels_last), "{channels_last:?}");
        assert!(apart([(0, 2), (2, 1), (5, 0)].into_iter()));
        assert!(!apart([(0, 2), (1, 1)].into_iter()));
    }
}
