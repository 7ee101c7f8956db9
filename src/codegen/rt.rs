//! The Rust side of generated code: `extern "C"` functions the JIT calls for what is
//! not worth emitting inline (intrinsics, heap scratch, parallel loops, micro-kernels,
//! failed access checks), and the per-call context through which they report errors.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::sync::Mutex;

use crate::core::par;
use crate::core::scalar::MathFn;

use super::kernel::{Kernel, KernelRegion};

/// What one call of a compiled function shares with the helpers: names for messages and
/// the first error met. Generated code keeps running after an error (the failing access
/// is skipped), so scopes still free their scratch; the call then returns the error.
pub(crate) struct CallCtx<'a> {
    pub names: &'a [String],
    pub error: Mutex<Option<String>>,
}

impl CallCtx<'_> {
    fn fail(&self, msg: impl FnOnce() -> String) {
        let mut e = self.error.lock().unwrap_or_else(|p| p.into_inner());
        if e.is_none() {
            *e = Some(msg());
        }
    }
    fn name(&self, buf: i64) -> &str {
        usize::try_from(buf)
            .ok()
            .and_then(|b| self.names.get(b))
            .map_or("?", |s| s.as_str())
    }
}

/// The signature of every generated function: environment (parameter pointers or the
/// captured values of an outlined parallel body), iteration index, call context.
pub(crate) type GenFn = unsafe extern "C" fn(*const i64, i64, *const CallCtx);

/// A checked access found its index outside the buffer.
pub(crate) extern "C" fn oob(ctx: *const CallCtx, buf: i64, index: i64, size: i64, store: i64) {
    // SAFETY: generated code passes the context it was called with.
    let ctx = unsafe { &*ctx };
    let what = if store != 0 { "store to" } else { "load of" };
    ctx.fail(|| {
        format!(
            "{what} `{}` at {index} is out of bounds (size {size})",
            ctx.name(buf)
        )
    });
}

/// A micro-kernel region that could not be proved inside its buffer failed its check.
pub(crate) extern "C" fn region_oob(ctx: *const CallCtx, buf: i64, dim: i64) {
    // SAFETY: generated code passes the context it was called with.
    let ctx = unsafe { &*ctx };
    ctx.fail(|| {
        format!(
            "micro-kernel region of `{}` leaves its buffer along axis {dim}",
            ctx.name(buf)
        )
    });
}

/// A divisor that could not be proved non-zero was zero.
pub(crate) extern "C" fn div_zero(ctx: *const CallCtx) {
    // SAFETY: generated code passes the context it was called with.
    unsafe { &*ctx }.fail(|| "integer division by zero".into());
}

pub(crate) extern "C" fn logf(x: f32) -> f32 {
    x.ln()
}

pub(crate) extern "C" fn powf(x: f32, y: f32) -> f32 {
    x.powf(y)
}

/// The helper generated code calls for `f`: one `extern "C"` function each.
pub(crate) fn math_fn(f: MathFn) -> *const () {
    macro_rules! helpers {
        ($($name:ident),*) => {
            match f {
                $(MathFn::$name => {
                    extern "C" fn helper(x: f32) -> f32 {
                        MathFn::$name.f32(x)
                    }
                    helper as *const ()
                })*
            }
        };
    }
    helpers!(Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh)
}

/// Aligned for 128-bit vector access.
const ALIGN: usize = 16;

fn scratch_layout(n: i64) -> Option<Layout> {
    let n = usize::try_from(n).ok().filter(|n| *n > 0)?;
    Layout::from_size_align(n.checked_mul(4)?, ALIGN).ok()
}

/// Scratch of `n` f32 elements (contents undefined), freed by [`free`] at scope end.
/// A negative size is an error of the program; it gets an empty buffer.
pub(crate) extern "C" fn alloc_f32(ctx: *const CallCtx, buf: i64, n: i64) -> *mut f32 {
    if n < 0 {
        // SAFETY: generated code passes the context it was called with.
        let ctx = unsafe { &*ctx };
        ctx.fail(|| format!("negative allocation of `{}` ({n})", ctx.name(buf)));
    }
    match scratch_layout(n) {
        // SAFETY: the layout has a non-zero size.
        Some(l) => {
            let p = unsafe { alloc(l) };
            if p.is_null() {
                handle_alloc_error(l);
            }
            p.cast()
        }
        None => std::ptr::NonNull::<[f32; 4]>::dangling().as_ptr().cast(),
    }
}

pub(crate) extern "C" fn free_f32(p: *mut f32, n: i64) {
    if let Some(l) = scratch_layout(n) {
        // SAFETY: `p` came from `alloc_f32` with the same size.
        unsafe { dealloc(p.cast(), l) }
    }
}

/// Raw pointers shared by the iterations of a parallel loop.
#[derive(Clone, Copy)]
struct Shared(*const i64, *const CallCtx<'static>);
// SAFETY: the environment is read-only during the loop and the context is a Mutex;
// the schedule check in codegen makes sure iterations write disjoint memory.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

/// Runs `body(env, i, ctx)` for `i` in `[min, min + extent)` on the pool installed on
/// the calling thread (`core::par`).
pub(crate) extern "C" fn parallel_for(
    body: GenFn,
    env: *const i64,
    min: i64,
    extent: i64,
    ctx: *const CallCtx,
) {
    let s = Shared(env, ctx.cast());
    let end = min.saturating_add(extent.max(0));
    par::for_each((end - min) as usize, move |k| {
        let s = s;
        // SAFETY: `body` is an outlined loop body compiled for this environment.
        unsafe { body(s.0, min + k as i64, s.1) }
    });
}

/// Calls a registered micro-kernel; its error (or panic) becomes the call's error.
pub(crate) extern "C" fn call_kernel(
    kernel: *const (String, Kernel),
    regions: *mut KernelRegion,
    n: i64,
    ctx: *const CallCtx,
) {
    // SAFETY: `kernel` points into the table the compiled function keeps alive, and
    // `regions` to `n` regions the generated code filled on its stack.
    let (ctx, (name, k)) = unsafe { (&*ctx, &*kernel) };
    let regions = unsafe { std::slice::from_raw_parts_mut(regions, n as usize) };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| k(regions)));
    match r {
        Ok(Ok(())) => {}
        Ok(Err(m)) => ctx.fail(|| format!("micro-kernel `{name}`: {m}")),
        Err(_) => ctx.fail(|| format!("micro-kernel `{name}` panicked")),
    }
}
