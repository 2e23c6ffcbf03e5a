//! The kernels: good ones first, then the known-bad negative controls.

use crate::recipe::{Defect, Recipe, SyncVar, WorkingType};
use crate::stats::{BlockFlaw, Moments, Summation};
use crate::{Expected, Kernel, Op};

/// Block length of the blocked kernels (a common CUDA block size).
const BLOCK: usize = 1024;

/// Chunk length of the Welford kernels (small, so moderate channels already exercise the merge).
const WELFORD_CHUNK: usize = 16;

/// The reference recipe the others vary: textbook two-pass in the working dtype.
const TWOPASS_NATIVE: Recipe = Recipe {
    name: "twopass-native",
    description: "Two-pass: mean = Σx/m, then var = Σ(x-mean)²/m, every sum pairwise (as \
                  numpy does), all in the working precision (f64 for f64, f32 for f32; f16/bf16 data computed \
                  in f32); sync ops form var = m2 - mean*mean. Outputs rounded to the dtype.",
    expected: Expected::Good,
    working_type: WorkingType::Native,
    moments: Moments::TwoPass,
    summation: Summation::Pairwise,
    sync_var: SyncVar::Plain,
    defect: None,
    defective_ops: &[],
};

/// A known-bad variant of `twopass-native`.
const fn bad(
    name: &'static str,
    description: &'static str,
    defective_ops: &'static [Op],
) -> Recipe {
    Recipe {
        name,
        description,
        expected: Expected::KnownBad,
        defective_ops,
        ..TWOPASS_NATIVE
    }
}

const BACKWARDS: &[Op] = &[Op::Backward, Op::SyncBackward];
const SYNC: &[Op] = &[Op::SyncForward, Op::SyncBackward];
/// The ops that normalise (a wrong `r` shows in each).
const ALL_OPS: &[Op] = &[
    Op::Forward,
    Op::Backward,
    Op::Eval,
    Op::SyncForward,
    Op::SyncBackward,
];
/// The ops that compute a channel's own variance.
const OWN_VAR: &[Op] = &[Op::Forward, Op::Backward, Op::RunningUpdate];

fn recipes() -> Vec<Recipe> {
    vec![
        Recipe {
            name: "twopass-f64",
            description: "Two-pass (mean, then Σ(x-mean)²), sums pairwise, everything \
                          computed in f64 whatever the dtype, each output rounded once to the \
                          dtype at the end.",
            working_type: WorkingType::F64,
            ..TWOPASS_NATIVE
        },
        TWOPASS_NATIVE,
        Recipe {
            name: "welford-native",
            description: "Welford's single-pass update over chunks of 16 cells, chunks \
                          merged as a balanced tree with Chan et al.'s parallel merge, in the \
                          working precision (f32 accumulation for f16/bf16).",
            moments: Moments::Welford {
                chunk: WELFORD_CHUNK,
            },
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "welford-f64",
            description: "Welford's update over chunks of 16 cells with Chan's merge, computed \
                          in f64 whatever the dtype, outputs rounded to the dtype.",
            working_type: WorkingType::F64,
            moments: Moments::Welford {
                chunk: WELFORD_CHUNK,
            },
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "compensated-f64",
            description: "Two-pass with every sum (Σx, Σ(x-mean)², Σdy, Σdy*xhat) done by \
                          Kahan–Babuška–Neumaier compensated summation in f64 whatever the \
                          dtype, outputs rounded to the dtype.",
            working_type: WorkingType::F64,
            summation: Summation::Compensated,
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "compensated-native",
            description: "Two-pass with every sum done by Kahan–Babuška–Neumaier compensated \
                          summation, in the working precision.",
            summation: Summation::Compensated,
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "sync-fma",
            description: "twopass-native, but the sync ops form var = fma(-mean, mean, m2) \
                          with a single rounding.",
            sync_var: SyncVar::Fma,
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "blocked-1024",
            description: "GPU-style block merge: each channel cut into blocks of 1024 cells \
                          (the last one partial), per block (count, mean, M2) by two pairwise \
                          passes, blocks merged with Chan's formula as a balanced tree; working \
                          precision as twopass-native. One block below 1025 cells.",
            moments: Moments::Blocked {
                block: BLOCK,
                flaw: BlockFlaw::None,
            },
            ..TWOPASS_NATIVE
        },
        Recipe {
            name: "twopass-storage",
            description: "The textbook two-pass (mean = Σ(x/m), then Σ((x-mean)²/m); sums \
                          pairwise, each term scaled by 1/m first so no sum overflows) with \
                          every operation in the storage precision: f16 and bf16 data are \
                          summed, squared and normalised in f16 (bf16) with no wider \
                          accumulator; f32 and f64 (and mixed precision, whose statistics \
                          are f32) in f32/f64.",
            working_type: WorkingType::Storage,
            moments: Moments::TwoPassScaled,
            ..TWOPASS_NATIVE
        },
        Recipe {
            moments: Moments::OnePass,
            ..bad(
                "bad-onepass-var",
                "KNOWN BAD: one-pass variance var = max(Σx²/m - mean², 0) in the working \
                 precision; cancels catastrophically when |mean| >> std. Otherwise \
                 twopass-native.",
                OWN_VAR,
            )
        },
        Recipe {
            defect: Some(Defect::EpsOutsideSqrt),
            ..bad(
                "bad-eps-outside-sqrt",
                "KNOWN BAD: normalises with 1/(sqrt(var) + eps) instead of 1/sqrt(var + eps), \
                 in every op. Otherwise twopass-native.",
                ALL_OPS,
            )
        },
        Recipe {
            defect: Some(Defect::UnbiasedVar),
            ..bad(
                "bad-unbiased-var",
                "KNOWN BAD: the variance it computes (forward's var output and the \
                 normalisation of forward and backward) divides by m-1 instead of m (by m \
                 when m = 1), also the batch variance of running_update. Otherwise \
                 twopass-native.",
                OWN_VAR,
            )
        },
        Recipe {
            defect: Some(Defect::NoProjection),
            ..bad(
                "bad-backward-missing-term",
                "KNOWN BAD: backward and sync_backward compute dx = gamma*r*(dy - mean(dy)), \
                 dropping the -xhat*mean(dy*xhat) term. Otherwise twopass-native.",
                BACKWARDS,
            )
        },
        Recipe {
            defect: Some(Defect::LocalStatsInSync),
            ..bad(
                "bad-sync-local-stats",
                "KNOWN BAD: sync_forward and sync_backward ignore the handed-in mean, m2, \
                 mean_dy, mean_dy_xhat and use this shard's own statistics (they compute \
                 forward's y and backward's dx, dgamma, dbeta). Only visible where the \
                 handed-in statistics differ from the shard's. Otherwise twopass-native.",
                SYNC,
            )
        },
        Recipe {
            summation: Summation::Storage16,
            ..bad(
                "bad-f16-accum",
                "KNOWN BAD: every sum's accumulator is stored in a 16-bit float after each \
                 addition (f16 for f16 data, bf16 for every other dtype); affects forward, \
                 backward, the dgamma/dbeta sums of sync_backward, running_update and \
                 sync_stats. Otherwise twopass-native.",
                &[
                    Op::Forward,
                    Op::Backward,
                    Op::SyncBackward,
                    Op::RunningUpdate,
                    Op::SyncStats,
                ],
            )
        },
        Recipe {
            moments: Moments::Blocked {
                block: BLOCK,
                flaw: BlockFlaw::DropTail,
            },
            ..bad(
                "bad-block-drop-tail",
                "KNOWN BAD: blocked-1024 that drops the last, partial block of a channel \
                 (its cells never counted) when the channel has more than one block; only \
                 visible on channels of more than 1024 cells whose size is not a multiple of \
                 1024 (the scale suite).",
                OWN_VAR,
            )
        },
        Recipe {
            moments: Moments::Blocked {
                block: BLOCK,
                flaw: BlockFlaw::NoDelta,
            },
            ..bad(
                "bad-block-merge-no-delta",
                "KNOWN BAD: blocked-1024 whose merge adds the blocks' M2 without Chan's \
                 between-block term δ²·n_a·n_b/n; only visible on channels of more than \
                 1024 cells whose blocks have different means (the scale suite).",
                OWN_VAR,
            )
        },
        Recipe {
            defect: Some(Defect::ZeroGammaDropsBeta),
            ..bad(
                "bad-gamma-zero",
                "KNOWN BAD: returns y = 0 on a channel whose gamma is 0 (a pruned-channel \
                 shortcut that forgets beta: the right answer there is y = beta). Only \
                 visible where some gamma is 0. Otherwise twopass-native.",
                &[Op::Forward, Op::Eval, Op::SyncForward],
            )
        },
        Recipe {
            defect: Some(Defect::EpsHalf),
            ..bad(
                "bad-eps-f16",
                "KNOWN BAD: eps rounded to f16 before use (1e-5 → 1.0014e-5, 0.1 → 0.09998), \
                 as a kernel that stores its scalar arguments in a half type; invisible in \
                 f16 outputs where eps ≪ var, visible in f32/f64 and in the f32 statistics \
                 of mixed precision. Otherwise twopass-native.",
                ALL_OPS,
            )
        },
        Recipe {
            defect: Some(Defect::Rsqrt12),
            ..bad(
                "bad-rsqrt12",
                "KNOWN BAD: r = (var + eps)^(-1/2) truncated to 12 significant bits, like \
                 a hardware rsqrt estimate without a Newton step (relative error up to \
                 2^-11: a defect in f32 and f64, within rounding noise in f16 and bf16). \
                 Otherwise twopass-native.",
                ALL_OPS,
            )
        },
        Recipe {
            defect: Some(Defect::DoubledVar),
            ..bad(
                "bad-var-doubled",
                "KNOWN BAD: the variance it computes is twice the batch variance (forward's \
                 var, the normalisation of forward and backward, running_update's batch \
                 variance): y and dx off by about 1/sqrt(2) where var >> eps. The control \
                 that the budget is sharp: every case whose channels are not all constant \
                 rejects it. Otherwise twopass-native.",
                OWN_VAR,
            )
        },
        Recipe {
            defect: Some(Defect::RstdOff25),
            ..bad(
                "bad-rstd-off25",
                "KNOWN BAD: r = 1.25/sqrt(var + eps), the normalisation 25 % off, in every \
                 op. Otherwise twopass-native.",
                ALL_OPS,
            )
        },
        Recipe {
            moments: Moments::WelfordHalfCount,
            ..bad(
                "bad-welford-f16-count",
                "KNOWN BAD: Welford's update over the whole channel with its cell counter \
                 held in f16, which sticks at 2048: on channels of more than 2048 cells (the \
                 scale suite) the mean is a moving average and var = M2/n far too large. \
                 Otherwise twopass-native (f32 working precision for half data).",
                OWN_VAR,
            )
        },
        Recipe {
            defect: Some(Defect::SwappedMomentum),
            ..bad(
                "bad-swapped-momentum",
                "KNOWN BAD: running_update weights the running and batch statistics with the \
                 other convention's momentum: (1-a)*old + a*batch for an ONNX case, \
                 a*old + (1-a)*batch for a PyTorch one (the variance estimator is right). \
                 Otherwise twopass-native.",
                &[Op::RunningUpdate],
            )
        },
        Recipe {
            defect: Some(Defect::WrongBessel),
            ..bad(
                "bad-running-var-bessel",
                "KNOWN BAD: running_update blends the biased batch variance in the PyTorch \
                 convention and the unbiased one (m/(m-1)) in the ONNX convention. \
                 Otherwise twopass-native.",
                &[Op::RunningUpdate],
            )
        },
        Recipe {
            defect: Some(Defect::EqualWeightShards),
            ..bad(
                "bad-sync-equal-weight",
                "KNOWN BAD: sync_stats averages the R shards' means and E[x²] with equal \
                 weights (the seed's all-reduce mean, right only when every shard holds as \
                 many cells). Otherwise twopass-native.",
                &[Op::SyncStats],
            )
        },
        Recipe {
            defect: Some(Defect::AveragedVariances),
            ..bad(
                "bad-sync-averaged-var",
                "KNOWN BAD: sync_stats returns the count-weighted mean of the shards' \
                 variances (m2_r - mean_r²) as the variance, dropping the spread of the \
                 shard means, and m2 = var + mean². The mean is right. Otherwise \
                 twopass-native.",
                &[Op::SyncStats],
            )
        },
        Recipe {
            defect: Some(Defect::EmptyShardCountsOne),
            ..bad(
                "bad-sync-empty-shard",
                "KNOWN BAD: sync_stats clamps every shard count to at least 1 (a common \
                 guard against division by zero), so a replica with no cells contributes \
                 its stale statistics with weight 1. Otherwise twopass-native.",
                &[Op::SyncStats],
            )
        },
    ]
}

/// Every kernel, good ones first, in a fixed order.
pub fn all_kernels() -> Vec<Box<dyn Kernel>> {
    recipes()
        .into_iter()
        .map(|r| Box::new(r) as Box<dyn Kernel>)
        .collect()
}

/// The kernel called `name`, if any.
pub fn kernel_by_name(name: &str) -> Option<Box<dyn Kernel>> {
    all_kernels().into_iter().find(|k| k.name() == name)
}

/// The kernel called `name` computing in f64 whatever the dtype (outputs still rounded to
/// the dtype once): a known-bad kernel's defect without the rounding noise of a narrower
/// working type, as the generator's sharpness controls need it (`suite::discriminating`).
pub fn kernel_in_f64(name: &str) -> Option<Box<dyn Kernel>> {
    recipes().into_iter().find(|r| r.name == name).map(|r| {
        Box::new(Recipe {
            working_type: WorkingType::F64,
            ..r
        }) as Box<dyn Kernel>
    })
}
