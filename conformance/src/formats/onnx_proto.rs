//! The subset of `onnx.proto` bnconf reads and writes (ONNX test data: `model.onnx`, an
//! `onnx.ModelProto`, and `test_data_set_*/{input,output}_K.pb`, each an `onnx.TensorProto`),
//! declared by hand with the official field numbers and types and deriving `prost::Message`:
//! no `protoc`, no generated code. One set of definitions for the reader of ONNX's own test
//! data (`peers::onnx`) and the writer of the ONNX export (`protocol::onnx_export`).
//!
//! Decoding skips the fields not declared here; prost checks every length against the
//! buffer, so a truncated or hostile file is an error, never a panic. A `oneof` of which one
//! member is used is declared as that member, optional: the same bytes on the wire.

/// `TensorProto.DataType.FLOAT`.
pub const DT_FLOAT: i32 = 1;
/// `TensorProto.DataType.FLOAT16`.
pub const DT_FLOAT16: i32 = 10;
/// `TensorProto.DataType.DOUBLE`.
pub const DT_DOUBLE: i32 = 11;
/// `TensorProto.DataType.BFLOAT16`.
pub const DT_BFLOAT16: i32 = 16;

/// `AttributeProto.AttributeType.FLOAT`.
pub const ATTR_FLOAT: i32 = 1;
/// `AttributeProto.AttributeType.INT`.
pub const ATTR_INT: i32 = 2;

/// `onnx.TensorProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    /// `repeated int64 dims = 1`.
    #[prost(int64, repeated, tag = "1")]
    pub dims: Vec<i64>,
    /// `optional int32 data_type = 2` (a `TensorProto.DataType`).
    #[prost(int32, tag = "2")]
    pub data_type: i32,
    /// `repeated float float_data = 4 [packed = true]`.
    #[prost(float, repeated, packed = "true", tag = "4")]
    pub float_data: Vec<f32>,
    /// `optional string name = 8`.
    #[prost(string, tag = "8")]
    pub name: String,
    /// `optional bytes raw_data = 9` (little-endian elements).
    #[prost(bytes = "vec", optional, tag = "9")]
    pub raw_data: Option<Vec<u8>>,
    /// `repeated double double_data = 10 [packed = true]`.
    #[prost(double, repeated, packed = "true", tag = "10")]
    pub double_data: Vec<f64>,
}

/// `onnx.AttributeProto` (scalar `f` and `i` only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    /// `optional string name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `optional float f = 2`.
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    /// `optional int64 i = 3`.
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// `optional AttributeType type = 20` ([`ATTR_FLOAT`], [`ATTR_INT`]; 0 when absent).
    #[prost(int32, tag = "20")]
    pub r#type: i32,
}

impl AttributeProto {
    /// A FLOAT attribute.
    pub fn float(name: &str, f: f32) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            f: Some(f),
            i: None,
            r#type: ATTR_FLOAT,
        }
    }
    /// An INT attribute.
    pub fn int(name: &str, i: i64) -> AttributeProto {
        AttributeProto {
            name: name.into(),
            f: None,
            i: Some(i),
            r#type: ATTR_INT,
        }
    }
}

/// `onnx.NodeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    /// `repeated string input = 1`.
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// `repeated string output = 2`.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// `optional string name = 3`.
    #[prost(string, tag = "3")]
    pub name: String,
    /// `optional string op_type = 4`.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// `repeated AttributeProto attribute = 5`.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
}

/// `onnx.TensorShapeProto.Dimension` (`dim_value` of its `oneof value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    /// `int64 dim_value = 1`.
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
}

/// `onnx.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    /// `repeated Dimension dim = 1`.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `onnx.TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorTypeProto {
    /// `optional int32 elem_type = 1` (a `TensorProto.DataType`).
    #[prost(int32, tag = "1")]
    pub elem_type: i32,
    /// `optional TensorShapeProto shape = 2`.
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `onnx.TypeProto` (`tensor_type` of its `oneof value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    /// `Tensor tensor_type = 1`.
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeProto>,
}

/// `onnx.ValueInfoProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    /// `optional string name = 1`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `optional TypeProto type = 2`.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

impl ValueInfoProto {
    /// A tensor of element type `elem_type` and static shape `dims`.
    pub fn tensor(name: &str, elem_type: i32, dims: &[usize]) -> ValueInfoProto {
        ValueInfoProto {
            name: name.into(),
            r#type: Some(TypeProto {
                tensor_type: Some(TensorTypeProto {
                    elem_type,
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&d| Dimension {
                                dim_value: Some(d as i64),
                            })
                            .collect(),
                    }),
                }),
            }),
        }
    }
}

/// `onnx.GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    /// `repeated NodeProto node = 1`.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// `optional string name = 2`.
    #[prost(string, tag = "2")]
    pub name: String,
    /// `repeated TensorProto initializer = 5`.
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// `optional string doc_string = 10`.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// `repeated ValueInfoProto input = 11`.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// `repeated ValueInfoProto output = 12`.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

/// `onnx.OperatorSetIdProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    /// `optional string domain = 1` (empty: the default `ai.onnx` domain).
    #[prost(string, tag = "1")]
    pub domain: String,
    /// `optional int64 version = 2`.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `onnx.ModelProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    /// `optional int64 ir_version = 1`.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// `optional string producer_name = 2`.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// `optional string producer_version = 3`.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// `optional GraphProto graph = 7`.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// `repeated OperatorSetIdProto opset_import = 8`.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message as _;

    /// The declared fields encode with ONNX's field numbers and wire types (bytes written by
    /// hand from onnx.proto), and decode back to the same message.
    #[test]
    fn wire_bytes_match_onnx_proto() {
        let a = AttributeProto::int("training_mode", 1);
        // name (1, len) "training_mode", i (3, varint) 1, type (20, varint) INT = 2.
        let mut want = vec![0x0a, 13];
        want.extend_from_slice(b"training_mode");
        want.extend_from_slice(&[0x18, 1, 0xa0, 0x01, 2]);
        assert_eq!(a.encode_to_vec(), want);
        assert_eq!(AttributeProto::decode(&want[..]).unwrap(), a);

        let t = TensorProto {
            dims: vec![2],
            data_type: DT_FLOAT,
            name: "X".into(),
            raw_data: Some(1f32.to_le_bytes().repeat(2)),
            ..Default::default()
        };
        let b = t.encode_to_vec();
        // dims (1, packed len 1) [2], data_type (2) 1, name (8) "X", raw_data (9) 8 bytes.
        assert_eq!(&b[..8], &[0x0a, 1, 2, 0x10, 1, 0x42, 1, b'X']);
        assert_eq!(&b[8..10], &[0x4a, 8]);
        assert_eq!(TensorProto::decode(&b[..]).unwrap(), t);

        let v = ValueInfoProto::tensor("Y", DT_DOUBLE, &[3]);
        // name, type { tensor_type { elem_type 11, shape { dim { dim_value 3 } } } }
        let mut want = vec![
            0x0a, 1, b'Y', 0x12, 10, 0x0a, 8, 0x08, 11, 0x12, 4, 0x0a, 2, 0x08, 3,
        ];
        assert_eq!(v.encode_to_vec(), want);
        want.truncate(3);
        assert_eq!(ValueInfoProto::decode(&want[..]).unwrap().name, "Y");
    }
}
