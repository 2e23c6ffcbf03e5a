//! The tensor names of FORMAT.md as a harness classifies them: which input and output names
//! are cell arrays (the layout's shape), per-shard arrays (length R) or per-channel arrays
//! (length C), and which are activations (stored in a case's `dtype`; every other array in its
//! `param_dtype`). The shape classes are [`Op::extent`]'s; this module names the questions a
//! harness asks of a name, so that it need not ask the kernels under test.

use crate::op::{Extent, Op};

/// Whether an input/output name is a cell array, one value per element of the layout's
/// shape: `x`, `dy`, `y`, `dx`, and `sync_stats`' `shard_mean` and `shard_m2`.
pub fn is_cell_array(name: &str) -> bool {
    Op::extent(name) == Extent::Cells
}

/// Whether an input/output name is a per-shard array of length R shared by every channel
/// (`shard_count` of `sync_stats`, whose layout is `rows` with shape `[C, R]`).
pub fn is_shard_array(name: &str) -> bool {
    Op::extent(name) == Extent::Shards
}

/// Whether an input/output name is an activation (`x`, `dy`, `y`, `dx`): stored in the
/// case's `dtype`, while every other array (the per-channel ones, and `sync_stats`'
/// statistics) is stored in its `param_dtype`.
pub fn is_activation(name: &str) -> bool {
    matches!(name, "x" | "dy" | "y" | "dx")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_of_every_op_is_classified() {
        let mut cells = Vec::new();
        let mut shards = Vec::new();
        let mut activations = Vec::new();
        for op in Op::ALL {
            for &name in op.inputs().iter().chain(op.outputs()) {
                if is_cell_array(name) && !cells.contains(&name) {
                    cells.push(name);
                }
                if is_shard_array(name) && !shards.contains(&name) {
                    shards.push(name);
                }
                if is_activation(name) && !activations.contains(&name) {
                    activations.push(name);
                }
                assert!(!(is_cell_array(name) && is_shard_array(name)), "{name}");
                // Every activation is a cell array; a cell array that is not an activation
                // is one of sync_stats' statistics.
                assert!(!is_activation(name) || is_cell_array(name), "{name}");
            }
            // The input that sets the cell count is a cell array.
            assert!(is_cell_array(op.cell_input()), "{op:?}");
        }
        cells.sort_unstable();
        assert_eq!(cells, ["dx", "dy", "shard_m2", "shard_mean", "x", "y"]);
        assert_eq!(shards, ["shard_count"]);
        activations.sort_unstable();
        assert_eq!(activations, ["dx", "dy", "x", "y"]);
        // Per-channel arrays, and names of no op, are neither.
        for name in [
            "gamma",
            "beta",
            "mean",
            "var",
            "m2",
            "running_mean",
            "new_var",
            "z",
        ] {
            assert!(!is_cell_array(name) && !is_shard_array(name) && !is_activation(name));
        }
    }
}
