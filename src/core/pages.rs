//! Large f32 buffers the kernels stream on every run (packed weights, the
//! activation arena), mapped on their own at a 2 MiB boundary and advised
//! onto transparent huge pages: a model's weights pass through the caches
//! once per run, and on 4 KiB pages each of their pages also costs a page
//! walk whose tables other weights evicted meanwhile (ResNet50 ran 4-6%
//! faster with huge pages on every allocation). Only the advice is asked
//! for: where the kernel gives none, the buffer is an ordinary mapping.

use std::ops::{Deref, DerefMut};

/// Bytes of one huge page, the alignment of a mapped buffer.
const HUGE_PAGE: usize = 2 << 20;

/// A zero-initialized buffer of f32, on its own mapping when it can hold a
/// huge page, else on the heap.
pub struct PageBuf(Repr);

enum Repr {
    Heap(Vec<f32>),
    #[cfg(unix)]
    Mapped(Mapping),
}

/// `len` f32 at `ptr`, the start of an anonymous mapping of `bytes` bytes.
#[cfg(unix)]
struct Mapping {
    ptr: std::ptr::NonNull<f32>,
    len: usize,
    bytes: usize,
}

// SAFETY: the mapping is owned by this buffer alone, like a Vec's memory.
#[cfg(unix)]
unsafe impl Send for Mapping {}
#[cfg(unix)]
unsafe impl Sync for Mapping {}

impl PageBuf {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> PageBuf {
        #[cfg(unix)]
        if len * std::mem::size_of::<f32>() >= HUGE_PAGE {
            if let Some(m) = Mapping::new(len) {
                return PageBuf(Repr::Mapped(m));
            }
        }
        PageBuf(Repr::Heap(vec![0.0; len]))
    }
}

#[cfg(unix)]
impl Mapping {
    /// A fresh anonymous mapping of `len` f32 starting on a huge-page
    /// boundary, advised onto huge pages before any page of it is touched
    /// (pages faulted in before the advice stay small). None if the system
    /// refuses the mapping.
    fn new(len: usize) -> Option<Mapping> {
        let page = page_size();
        let bytes = (len * std::mem::size_of::<f32>()).next_multiple_of(page);
        // Mapped with a huge page of slack, then trimmed to the aligned part.
        let span = bytes + HUGE_PAGE;
        // SAFETY: a new private anonymous mapping; nothing else refers to it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let head = (base as usize).next_multiple_of(HUGE_PAGE) - base as usize;
        let start = (base as usize + head) as *mut libc::c_void;
        // SAFETY: both trimmed pieces lie inside the mapping just made, at
        // page boundaries, and are not used; the advice covers the kept part.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            let tail = span - head - bytes;
            if tail > 0 {
                libc::munmap((start as usize + bytes) as *mut libc::c_void, tail);
            }
            #[cfg(target_os = "linux")]
            libc::madvise(start, bytes, libc::MADV_HUGEPAGE);
        }
        Some(Mapping {
            ptr: std::ptr::NonNull::new(start.cast())?,
            len,
            bytes,
        })
    }
}

#[cfg(unix)]
impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `Mapping::new` and is unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.bytes) };
    }
}

#[cfg(unix)]
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

impl Deref for PageBuf {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match &self.0 {
            Repr::Heap(v) => v,
            // SAFETY: the mapping holds `len` f32, zeroed by the kernel or
            // written since, and lives as long as `self`.
            #[cfg(unix)]
            Repr::Mapped(m) => unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) },
        }
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        match &mut self.0 {
            Repr::Heap(v) => v,
            // SAFETY: as in `deref`, borrowed mutably through `self`.
            #[cfg(unix)]
            Repr::Mapped(m) => unsafe { std::slice::from_raw_parts_mut(m.ptr.as_ptr(), m.len) },
        }
    }
}

impl Default for PageBuf {
    fn default() -> PageBuf {
        PageBuf(Repr::Heap(Vec::new()))
    }
}

/// The system allocator, with every allocation large enough to hold whole
/// huge pages advised onto them before it is touched: a model's weights,
/// decoded from its file, and the buffers a plan measures kernels in are
/// faulted in 2 MiB at a time instead of 4 KiB (page faults were a quarter
/// of a warm ResNet50 import, plan and compile, most of them on weights
/// copied once). The advice covers the allocation's aligned interior only,
/// so no byte outside it is mapped; smaller allocations are left as they
/// are, and so is everything where the kernel gives no advice. Installed by
/// the command line and the Python package (`#[global_allocator]`); a
/// program embedding the library may install it too.
pub struct HugePageAdvice;

/// Allocations of at least this many bytes are advised.
const ADVISED_BYTES: usize = 2 * HUGE_PAGE;

// SAFETY: every call is the system allocator's; the advice changes how the
// kernel backs pages of the allocation, never its contents or its extent.
unsafe impl std::alloc::GlobalAlloc for HugePageAdvice {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let p = unsafe { std::alloc::System.alloc(layout) };
        advise_huge(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { std::alloc::System.alloc_zeroed(layout) };
        advise_huge(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: as in `alloc`.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, size: usize) -> *mut u8 {
        // SAFETY: as in `alloc`.
        let p = unsafe { std::alloc::System.realloc(ptr, layout, size) };
        if size > layout.size() {
            advise_huge(p, size);
        }
        p
    }
}

/// Advises the whole huge pages inside `size` bytes at `p` onto huge pages.
fn advise_huge(p: *mut u8, size: usize) {
    #[cfg(target_os = "linux")]
    if !p.is_null() && size >= ADVISED_BYTES {
        let start = (p as usize).next_multiple_of(HUGE_PAGE);
        let end = (p as usize + size) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside the allocation just made, at
            // page boundaries; MADV_HUGEPAGE leaves its contents as they are.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (p, size);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_and_large_buffers_start_zeroed_and_keep_what_is_written() {
        for len in [
            0,
            1,
            1000,
            HUGE_PAGE / 4 - 1,
            HUGE_PAGE / 4,
            3 * HUGE_PAGE / 4 + 5,
        ] {
            let mut b = PageBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&v| v == 0.0));
            for (i, v) in b.iter_mut().enumerate() {
                *v = i as f32;
            }
            assert!(b.iter().enumerate().all(|(i, &v)| v == i as f32));
        }
    }

    #[test]
    fn advised_allocations_keep_their_contents() {
        use std::alloc::{GlobalAlloc, Layout};
        let a = HugePageAdvice;
        for size in [64, ADVISED_BYTES - 1, ADVISED_BYTES, 3 * ADVISED_BYTES + 12] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero size; freed with the layout it was made with.
            unsafe {
                let z = a.alloc_zeroed(layout);
                assert!(!z.is_null());
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                z.write_bytes(7, size);
                let grown = a.realloc(z, layout, 2 * size);
                let kept = std::slice::from_raw_parts(grown, size);
                assert!(kept.iter().all(|&b| b == 7));
                a.dealloc(grown, Layout::from_size_align(2 * size, 64).unwrap());
            }
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_buffer_that_can_hold_a_huge_page_is_mapped_at_a_huge_page_boundary() {
        let b = PageBuf::zeroed(HUGE_PAGE / 4);
        assert!(matches!(b.0, Repr::Mapped(_)));
        assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0);
        let small = PageBuf::zeroed(HUGE_PAGE / 4 - 1);
        assert!(matches!(small.0, Repr::Heap(_)));
    }
}
