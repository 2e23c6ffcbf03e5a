//! The fast exact reference: correctly rounded golden vectors at float speed (docs/DESIGN.md §5).
//!
//! Same results as the per-element exact path ([`bnconf_spec::Problem::evaluate`] followed by
//! [`bnconf_spec::exact::round::round`]), bit for bit, for inputs that are binary floats (npy data, or
//! case values of dtype f32/f64). Method:
//!
//! 1. **Exact sums** per channel of `x`, `x²`, `dy`, `dy·x` in a fixed-point superaccumulator
//!    ([`acc::SuperAcc`]): one pass, no allocation per element. f32 data first sums integer
//!    mantissas per exponent ([`acc::F32Buckets`]: one integer `add` per sum and element),
//!    flushed into the superaccumulators every 2^20 values.
//! 2. **Exact per-channel rationals** from those sums (`mean = S1/m`,
//!    `var = (m S2 − S1²)/m²`, `q = var + eps`, ...). Every cell output of every op is then
//!    `P + Gd·(dy − A) + Cx·(x − μ)` with per-channel constants, where `Gd` and `Cx` are a
//!    rational or a rational times `1/sqrt(q)`.
//! 3. **Per element**, that expression in double-double ([`dd`]) with a rigorous bound
//!    `err = 2^-95·(|P| + |Gd|(|dy| + |A|) + |Cx|(|x| + |μ|)) + 2^-1000` on the absolute error
//!    (the operations' own bounds sum to below 2^-100 times the same magnitudes). If the whole
//!    interval `[v − err, v + err]` rounds to one float, that float is the correctly rounded
//!    result; otherwise (near a midpoint, near zero, out of range) the element is computed by
//!    the exact path: its `a + b·sqrt(q)` is built and rounded by `spec` (Ziv's strategy).
//!    Contiguous runs of a channel go through a branch-free block kernel
//!    (`block_approx`, the same arithmetic), which the compiler vectorises (AVX2 + FMA where
//!    the CPU has them, chosen at run time); the exact path then takes the block's
//!    undecided elements.
//! 4. Per-channel outputs (`mean`, `var`, `dgamma`, `dbeta`) are built exactly and rounded by
//!    `spec`.
//!
//! Channels run in parallel (rayon); every value is exact or correctly rounded, so the result
//! cannot depend on the thread count.
//!
//! Rooms: [`problem`] (the problem and its outputs), [`sums`] (step 1), [`consts`] (step 2),
//! [`eval`] (step 3: the element loop and block kernels, [`compute`]), [`npy_case`] (reading
//! a case file), [`round`] (f16/bf16 through f64), [`golden`] (goldens by the fast path);
//! [`acc`], [`dd`] and [`cells`] their arithmetic and per-element access.

pub mod acc;
pub mod cells;
pub mod consts;
pub mod dd;
pub mod eval;
pub mod family;
pub mod family_last;
mod family_rows;
pub mod golden;
pub mod npy_case;
pub mod problem;
pub mod round;
pub mod sums;

pub use crate::par::with_threads;
pub use cells::channel_runs;
pub use eval::{compute, compute_cells, decide_f32, decide_f64};
pub use golden::*;
pub use npy_case::read_fast_case;
pub use problem::{
    covers, exact_f64, rational_to_f64_exact, Cell, FastOutputs, FastProblem, FastStats,
};
pub use round::{is_midpoint, round_via_f64, rounded_of};
