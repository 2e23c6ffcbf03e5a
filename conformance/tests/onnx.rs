//! ONNX's own BatchNormalization test data (conformance/data/onnx, committed in the
//! repository), decoded and judged by the exact reference. Every assertion is on a computed
//! fact; nothing is a hard-coded ratio.

use bnconf::peers::onnx::{
    builtin_tests, decimal_eps, eps_of, find_tests, judge, load_test, nchw_shape, parse_model,
    parse_tensor, run_builtin, run_dirs, OnnxTest, BUILTIN, BUILTIN_ROOT,
};
use bnconf_spec::exact::round::f64_to_rational;
use bnconf_spec::Op;
use std::path::{Path, PathBuf};

/// The copy of ONNX's test data committed in the repository (conformance/data/onnx).
fn onnx_root() -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/onnx");
    assert!(
        p.is_dir(),
        "ONNX test data missing: expected {} (committed in the repository)",
        p.display()
    );
    p
}

fn all_tests() -> Vec<OnnxTest> {
    let dirs = find_tests(&onnx_root()).expect("listing the ONNX test dirs");
    dirs.iter()
        .map(|d| load_test(d).unwrap_or_else(|e| panic!("{}: {e}", d.display())))
        .collect()
}

#[test]
fn all_nine_dirs_parse() {
    let tests = all_tests();
    let mut names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "test_BatchNorm1d_3d_input_eval",
            "test_BatchNorm2d_eval",
            "test_BatchNorm2d_momentum_eval",
            "test_BatchNorm3d_eval",
            "test_BatchNorm3d_momentum_eval",
            "test_batchnorm_epsilon",
            "test_batchnorm_epsilon_training_mode",
            "test_batchnorm_example",
            "test_batchnorm_example_training_mode",
        ]
    );
}

/// The shapes the README documents for the node tests: x (2,3,4,5), per-channel tensors (3),
/// all float32, eps 1e-5 or 1e-2 as float32, momentum 0.9, three outputs in training mode.
#[test]
fn node_tests_have_the_documented_shapes_and_attributes() {
    let node: Vec<OnnxTest> = all_tests()
        .into_iter()
        .filter(|t| t.name.starts_with("test_batchnorm"))
        .collect();
    assert_eq!(node.len(), 4);
    for t in &node {
        assert_eq!(t.inputs[0].dims, [2, 3, 4, 5], "{}", t.name);
        for p in &t.inputs[1..] {
            assert_eq!(p.dims, [3], "{}", t.name);
        }
        for x in t.inputs.iter().chain(&t.expected) {
            assert_eq!(x.data_type, bnconf::peers::onnx::DT_FLOAT, "{}", t.name);
        }
        let eps_dec = if t.name.contains("epsilon") {
            1e-2f32
        } else {
            1e-5
        };
        assert_eq!(t.epsilon.to_bits(), eps_dec.to_bits(), "{}", t.name);
        assert_eq!(t.training, t.name.ends_with("training_mode"), "{}", t.name);
        assert_eq!(t.expected.len(), if t.training { 3 } else { 1 });
        assert_eq!(t.expected[0].dims, t.inputs[0].dims);
        if t.training {
            assert_eq!(t.momentum.to_bits(), 0.9f32.to_bits(), "{}", t.name);
            assert_eq!(t.expected[1].dims, [3]);
            assert_eq!(t.expected[2].dims, [3]);
        }
    }
}

/// PyTorch exports: one input file (x); scale, bias, mean and var come from the initializers
/// of model.onnx. Channel tensors match C, and the nchw mapping keeps every element.
#[test]
fn pytorch_converted_take_parameters_from_initializers() {
    for t in all_tests()
        .into_iter()
        .filter(|t| t.name.starts_with("test_BatchNorm"))
    {
        let inputs = std::fs::read_dir(t.dir.join("test_data_set_0"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("input_")
            })
            .count();
        assert_eq!(inputs, 1, "{}", t.name);
        let x = &t.inputs[0].dims;
        let rank = if t.name.contains("1d") {
            3
        } else if t.name.contains("2d") {
            4
        } else {
            5
        };
        assert_eq!(x.len(), rank, "{}: X {x:?}", t.name);
        for p in &t.inputs[1..] {
            assert_eq!(p.dims, [x[1]], "{}", t.name);
        }
        let s = nchw_shape(x).unwrap();
        assert_eq!(
            s.iter().product::<usize>(),
            x.iter().product::<usize>(),
            "{}",
            t.name
        );
        assert_eq!(s[..2], x[..2]);
        assert!(!t.training, "{}", t.name);
    }
}

/// The float32 eps attribute is what the exact reference uses: 1e-5 as float32 is
/// 9.99999974737875163555145263671875e-6, not the decimal.
#[test]
fn eps_is_the_float32_attribute_exactly() {
    for t in all_tests() {
        let e = eps_of(&t);
        assert_eq!(e, f64_to_rational(f64::from(t.epsilon)).unwrap());
        assert_ne!(
            e,
            decimal_eps(&t),
            "{}: a float32 eps is never 1e-5 or 1e-2",
            t.name
        );
    }
}

/// Every expected output ONNX ships is judged; the verdict of each is recorded and the facts
/// behind it are checked: ratios are finite, the gate agrees with `ratio <= k(m)`, and every
/// expected output passes our f32 gate (they are float32 results of textbook formulas).
#[test]
fn onnx_expected_outputs_are_within_the_f32_budget() {
    let mut judged = 0;
    for t in all_tests() {
        let v = judge(&t, eps_of(&t)).unwrap_or_else(|e| panic!("{}: {e}", t.name));
        assert_eq!(v.op, if t.training { Op::Forward } else { Op::Eval });
        assert_eq!(v.outputs.len(), t.expected.len());
        for o in &v.outputs {
            judged += 1;
            assert!(o.worst_ratio.is_finite(), "{} {}", t.name, o.name);
            assert_eq!(o.pass(), o.worst_ratio <= o.k);
            assert!(
                o.pass(),
                "{} {}: ONNX's expected output exceeds our f32 budget: worst ratio {} > k = {}",
                t.name,
                o.name,
                o.worst_ratio,
                o.k
            );
            // ONNX's own tolerance (rtol 1e-3, atol 1e-7) is far looser than what it ships.
            assert!(
                o.max_rel < 1e-3 || o.max_abs < 1e-7,
                "{} {}",
                t.name,
                o.name
            );
        }
    }
    assert_eq!(judged, 2 + 2 * 3 + 5, "9 tests, 13 outputs");
}

/// With the decimal eps instead of the float32 one, the exact reference moves: `Y`'s ratio
/// against it differs from the true one in every test (the eps difference is ~2.5e-13
/// absolute for 1e-5 and ~2.2e-10 for 1e-2, each a fraction of f32's resolution).
#[test]
fn decimal_eps_changes_the_reference() {
    for t in all_tests() {
        let a = judge(&t, eps_of(&t)).unwrap().outputs[0].worst_ratio;
        let b = judge(&t, decimal_eps(&t)).unwrap().outputs[0].worst_ratio;
        assert!(a.is_finite() && b.is_finite(), "{}", t.name);
        assert_ne!(a, b, "{}: eps changed, so the exact y did", t.name);
    }
}

#[test]
fn truncated_or_foreign_protobuf_is_an_error_not_a_panic() {
    let root = onnx_root();
    let p = root.join("node/test_batchnorm_example/test_data_set_0/input_0.pb");
    let bytes = std::fs::read(&p).unwrap();
    let t = parse_tensor(&bytes).unwrap();
    assert_eq!(t.values.len(), 120);
    for cut in [1, 2, 5, bytes.len() / 2, bytes.len() - 1] {
        assert!(parse_tensor(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    // A data_type other than FLOAT/DOUBLE (here INT64 = 7) is refused.
    assert!(parse_tensor(&[0x08, 0x01, 0x10, 0x07]).is_err());
    // Non-packed float_data (fixed32 each) decodes like packed.
    let unpacked = [
        0x08, 0x02, 0x10, 0x01, 0x25, 0, 0, 0x80, 0x3f, 0x25, 0, 0, 0, 0x40,
    ];
    assert_eq!(parse_tensor(&unpacked).unwrap().values, [1.0, 2.0]);
}

/// Every file under `dir`, relative to it with `/` separators, sorted.
fn files_under(dir: &Path, rel: &str, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        if e.file_type().unwrap().is_dir() {
            files_under(&e.path(), &r, out);
        } else {
            out.push(r);
        }
    }
}

/// The data compiled into the binary (`bnconf onnx` without arguments) is exactly the
/// committed files: the same list (all but our README, NOTICE and .gitattributes) and the
/// same bytes.
#[test]
fn builtin_data_is_the_committed_files() {
    let root = onnx_root();
    let mut on_disk = Vec::new();
    files_under(&root, "", &mut on_disk);
    on_disk.retain(|f| !["README.md", "NOTICE", ".gitattributes"].contains(&f.as_str()));
    on_disk.sort();
    let mut built_in: Vec<String> = BUILTIN.iter().map(|(p, _)| p.to_string()).collect();
    built_in.sort();
    assert_eq!(built_in, on_disk);
    for (p, bytes) in BUILTIN {
        assert!(
            std::fs::read(root.join(p)).unwrap() == *bytes,
            "{p}: the built-in copy differs from the file"
        );
    }
    assert_eq!(builtin_tests().len(), 9);
}

/// `bnconf onnx` (built-in data) and `bnconf onnx conformance/data/onnx` give the same table.
#[test]
fn builtin_run_equals_the_run_from_disk() {
    let (rows_b, table_b) = run_builtin().unwrap();
    let (rows_d, table_d) = run_dirs(&[onnx_root()]).unwrap();
    assert_eq!(rows_b.len(), 9);
    assert_eq!(rows_b, rows_d);
    assert_eq!(table_b, table_d);
    // 2 header lines, then one line per output: 9 tests, 13 outputs.
    assert_eq!(table_b.lines().count(), 2 + 13);
}

/// A small deterministic generator (xorshift64*), for garbage bytes.
fn garbage(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Random bytes are refused as a tensor and as a model, with an error, never a panic.
#[test]
fn random_bytes_are_an_error_not_a_panic() {
    for seed in 0..500 {
        for len in [1, 3, 16, 100, 1000] {
            let b = garbage(seed, len);
            assert!(parse_tensor(&b).is_err(), "seed {seed}, {len} bytes");
            // A random model may decode (unknown fields are skipped); it must never panic.
            let _ = parse_model(&b);
        }
    }
}

/// A copy of one test directory in a fresh temporary directory.
fn scratch_copy(test: &str, tag: &str) -> PathBuf {
    let src = onnx_root().join("node").join(test);
    let dst = std::env::temp_dir().join(format!("bnconf-onnx-{}-{tag}/{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dst);
    std::fs::create_dir_all(dst.join("test_data_set_0")).unwrap();
    for f in ["model.onnx"]
        .into_iter()
        .map(String::from)
        .chain((0..5).map(|k| format!("test_data_set_0/input_{k}.pb")))
        .chain(["test_data_set_0/output_0.pb".to_string()])
    {
        std::fs::copy(src.join(&f), dst.join(&f)).unwrap();
    }
    dst
}

/// How a test spoils a file's bytes.
type Spoil = fn(Vec<u8>) -> Vec<u8>;

/// A truncated or garbage model.onnx or .pb in a test directory: `load_test` and `run_dirs`
/// fail with an error that names the file.
#[test]
fn truncated_or_garbage_files_are_errors_naming_the_file() {
    let cases: [(&str, Spoil); 4] = [
        ("model.onnx", |b| b[..b.len() - 3].to_vec()),
        ("model.onnx", |b| garbage(7, b.len())),
        ("test_data_set_0/input_2.pb", |b| b[..b.len() / 2].to_vec()),
        ("test_data_set_0/output_0.pb", |b| garbage(11, b.len())),
    ];
    for (i, (file, spoil)) in cases.into_iter().enumerate() {
        let dir = scratch_copy("test_batchnorm_example", &i.to_string());
        assert!(load_test(&dir).is_ok(), "the untouched copy loads");
        let p = dir.join(file);
        std::fs::write(&p, spoil(std::fs::read(&p).unwrap())).unwrap();
        let e = load_test(&dir).expect_err(file).to_string();
        assert!(e.contains(&p.display().to_string()), "{file}: {e}");
        let e = run_dirs(std::slice::from_ref(&dir))
            .expect_err(file)
            .to_string();
        assert!(e.contains(&p.display().to_string()), "{file}: {e}");
        std::fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }
}

/// Built-in tests carry a directory under BUILTIN_ROOT, so messages say where the data came
/// from.
#[test]
fn builtin_tests_live_under_the_builtin_root() {
    for d in builtin_tests() {
        assert!(d.starts_with(BUILTIN_ROOT), "{}", d.display());
    }
}
