//! File formats of the public contract (docs/FORMAT.md): case files, golden files, npy arrays,
//! the ONNX protobuf messages (test data and models), the atomic (temp file + rename) writes
//! every output goes through, and the safe reads (regular files only, sizes checked first)
//! every input goes through.

pub mod atomic;
pub mod case;
pub mod family_case;
pub mod fsafe;
pub mod golden;
pub mod npy;
pub mod onnx_proto;
