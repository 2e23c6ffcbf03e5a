//! Reading the ONNX exports' files back: a `TensorProto` file and its values.

use bnconf::formats::onnx_proto as pb;
use bnconf_spec::exact::round::FloatFormat;
use prost::Message as _;
use std::path::Path;

/// A TensorProto's values (raw_data, little-endian) in the format its data_type names.
pub fn values(t: &pb::TensorProto) -> (FloatFormat, Vec<f64>) {
    let raw = t.raw_data.as_ref().expect("raw_data");
    match t.data_type {
        pb::DT_FLOAT => (
            FloatFormat::F32,
            raw.chunks(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                .collect(),
        ),
        pb::DT_DOUBLE => (
            FloatFormat::F64,
            raw.chunks(8)
                .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
        ),
        pb::DT_FLOAT16 => (
            FloatFormat::F16,
            raw.chunks(2)
                .map(|b| half::f16::from_le_bytes(b.try_into().unwrap()).to_f64())
                .collect(),
        ),
        pb::DT_BFLOAT16 => (
            FloatFormat::BF16,
            raw.chunks(2)
                .map(|b| half::bf16::from_le_bytes(b.try_into().unwrap()).to_f64())
                .collect(),
        ),
        d => panic!("data_type {d}"),
    }
}

pub fn pb_file(path: &Path) -> pb::TensorProto {
    pb::TensorProto::decode(&std::fs::read(path).unwrap()[..]).unwrap()
}
