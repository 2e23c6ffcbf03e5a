//! Peers' own test data judged by the exact reference (ONNX's BatchNormalization node tests).

pub mod onnx;
