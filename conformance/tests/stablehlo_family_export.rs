//! `bnconf export --family F --format stablehlo` (docs/FORMAT.md, "Added in bnconf 0.3: the
//! family's StableHLO export"): every family case is a module, unsupported (with its reason) or
//! excluded; each module's constants are the suite's inputs bit for bit; the goldens are the
//! exact outputs with float32(eps), correctly rounded (recomputed here from the exact reference,
//! not the export's path); the budgets are `k·u·total(u)` of the judge; and the module computes
//! what it says: a small evaluator of the StableHLO ops the export writes (constant,
//! optimization_barrier, reshape, transpose, broadcast_in_dim, reduce-add, add, subtract,
//! multiply, divide, rsqrt; each op rounded to the module's dtype, sums in order) runs every
//! module, and every result must be within its budget. The bytes do not depend on the thread
//! count; f16 and mixed precision are exit 2 naming `--dtype`.
//! Run in release (`cargo test --release -p bnconf --test stablehlo_family_export`).

mod common;

use bnconf::formats::npy::{read_npy_any, NpyData};
use bnconf::judge::family::prepare_family;
use bnconf::suite::family::{family_goldens, format_of, Golden};
use bnconf_impl::family::Named;
use bnconf_spec::exact::round::{round, FloatFormat};
use common::text;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn export(prec: &str, dir: &Path, env: &[(&str, &str)]) -> Value {
    let m = common::family_export::export(
        "stablehlo",
        prec,
        dir,
        env,
        "StableHLO modules of family all",
        "bnconf-stablehlo/1",
    );
    assert_eq!(m["entry"], "main");
    m
}

/// A tensor of the evaluator: row-major values (already rounded to the module's dtype).
#[derive(Clone, Debug)]
struct T {
    shape: Vec<usize>,
    v: Vec<f64>,
}

/// `tensor<2x3xf32>` → ([2, 3], "f32").
fn tensor_type(s: &str) -> (Vec<usize>, String) {
    let inner = s
        .trim()
        .strip_prefix("tensor<")
        .and_then(|r| r.strip_suffix('>'))
        .unwrap_or_else(|| panic!("not a tensor type: {s}"));
    let mut parts: Vec<&str> = inner.split('x').collect();
    let elem = parts.pop().unwrap().to_string();
    (parts.iter().map(|d| d.parse().unwrap()).collect(), elem)
}

/// The last `tensor<…>` of a line: the result type.
fn result_shape(line: &str) -> Vec<usize> {
    let i = line.rfind("tensor<").unwrap();
    let j = i + line[i..].find('>').unwrap();
    tensor_type(&line[i..=j]).0
}

fn dims_attr(line: &str, key: &str) -> Vec<usize> {
    let i = line.find(key).unwrap_or_else(|| panic!("no {key}: {line}")) + key.len();
    let j = i + line[i..].find(']').unwrap();
    let inner = line[i..j].trim().trim_start_matches('[');
    if inner.trim().is_empty() {
        return vec![];
    }
    inner
        .split(',')
        .map(|d| d.trim().parse().unwrap())
        .collect()
}

fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Multi-index of flat position `i` in `shape`.
fn unflatten(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Run a module's `@main`: its results in order, and its constants by name (`%x_c` → "x").
fn evaluate(module: &str) -> (Vec<T>, BTreeMap<String, T>) {
    let mut env: BTreeMap<String, T> = BTreeMap::new();
    let mut consts = BTreeMap::new();
    let mut f32_mode = None;
    let rnd = |f32m: bool, x: f64| if f32m { x as f32 as f64 } else { x };
    for line in module.lines().map(str::trim) {
        if line.starts_with("//") || !line.starts_with('%') && !line.starts_with("return") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("return ") {
            let names = rest.split(" : ").next().unwrap();
            let outs = names.split(", ").map(|n| env[n.trim()].clone()).collect();
            return (outs, consts);
        }
        let (lhs, rhs) = line.split_once(" = ").unwrap();
        let op = rhs.split([' ', '(']).next().unwrap();
        let args: Vec<&str> = rhs
            .split(" : ")
            .next()
            .unwrap()
            .split([' ', ',', '(', ')'])
            .filter(|w| w.starts_with('%'))
            .collect();
        let arg = |k: usize| env[args[k]].clone();
        let out_shape = result_shape(line);
        let f32m = *f32_mode.get_or_insert_with(|| {
            let i = line.rfind("tensor<").unwrap();
            line[i..].contains("f32>")
        });
        let t = match op {
            "stablehlo.constant" => {
                let lit = rhs
                    .strip_prefix("stablehlo.constant dense<")
                    .unwrap()
                    .split('>')
                    .next()
                    .unwrap();
                let n: usize = out_shape.iter().product();
                let t = if let Some(hex) = lit.strip_prefix("\"0x") {
                    let bytes: Vec<u8> = (0..(hex.len() - 1) / 2)
                        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
                        .collect();
                    let v: Vec<f64> = if f32m {
                        bytes
                            .chunks(4)
                            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
                            .collect()
                    } else {
                        bytes
                            .chunks(8)
                            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                            .collect()
                    };
                    assert_eq!(v.len(), n, "{line}");
                    T {
                        shape: out_shape,
                        v,
                    }
                } else {
                    let x: f64 = lit.parse().unwrap();
                    assert_eq!(rnd(f32m, x), x, "a splat the dtype holds exactly: {line}");
                    T {
                        shape: out_shape,
                        v: vec![x; n],
                    }
                };
                if let Some(name) = lhs.strip_prefix('%').and_then(|n| n.strip_suffix("_c")) {
                    consts.insert(name.to_string(), t.clone());
                }
                t
            }
            "stablehlo.optimization_barrier" => {
                for (l, r) in lhs.split(", ").zip(&args) {
                    env.insert(l.to_string(), env[*r].clone());
                }
                continue;
            }
            "stablehlo.add" | "stablehlo.subtract" | "stablehlo.multiply" | "stablehlo.divide" => {
                let (a, b) = (arg(0), arg(1));
                assert_eq!(a.shape, b.shape, "{line}");
                assert_eq!(a.shape, out_shape, "{line}");
                let f: fn(f64, f64) -> f64 = match op {
                    "stablehlo.add" => |a, b| a + b,
                    "stablehlo.subtract" => |a, b| a - b,
                    "stablehlo.multiply" => |a, b| a * b,
                    _ => |a, b| a / b,
                };
                T {
                    shape: out_shape,
                    v: a.v
                        .iter()
                        .zip(&b.v)
                        .map(|(&x, &y)| rnd(f32m, f(x, y)))
                        .collect(),
                }
            }
            "stablehlo.rsqrt" => {
                let a = arg(0);
                assert_eq!(a.shape, out_shape, "{line}");
                T {
                    shape: out_shape,
                    v: a.v.iter().map(|&x| rnd(f32m, 1.0 / x.sqrt())).collect(),
                }
            }
            "stablehlo.reshape" => {
                let a = arg(0);
                assert_eq!(a.v.len(), out_shape.iter().product::<usize>(), "{line}");
                T {
                    shape: out_shape,
                    v: a.v,
                }
            }
            "stablehlo.transpose" => {
                let a = arg(0);
                let perm = dims_attr(line, "dims =");
                let want: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
                assert_eq!(want, out_shape, "{line}");
                let st = strides(&a.shape);
                let v = (0..a.v.len())
                    .map(|i| {
                        let j = unflatten(i, &out_shape);
                        let src: usize = perm.iter().zip(&j).map(|(&p, &ji)| ji * st[p]).sum();
                        a.v[src]
                    })
                    .collect();
                T {
                    shape: out_shape,
                    v,
                }
            }
            "stablehlo.broadcast_in_dim" => {
                let a = arg(0);
                let dims = dims_attr(line, "dims =");
                assert_eq!(dims.len(), a.shape.len(), "{line}");
                let st = strides(&a.shape);
                let n: usize = out_shape.iter().product();
                let v = (0..n)
                    .map(|i| {
                        let j = unflatten(i, &out_shape);
                        let src: usize = dims
                            .iter()
                            .enumerate()
                            .map(|(k, &d)| {
                                assert!(a.shape[k] == out_shape[d] || a.shape[k] == 1, "{line}");
                                (if a.shape[k] == 1 { 0 } else { j[d] }) * st[k]
                            })
                            .sum();
                        a.v[src]
                    })
                    .collect();
                T {
                    shape: out_shape,
                    v,
                }
            }
            op if op.starts_with("stablehlo.reduce") => {
                assert!(line.contains("applies stablehlo.add"), "{line}");
                let a = arg(0);
                assert!(env[args[1]].v.iter().all(|&z| z == 0.0), "init 0: {line}");
                let dims = dims_attr(line, "across dimensions =");
                let keep: Vec<usize> = (0..a.shape.len()).filter(|d| !dims.contains(d)).collect();
                let kept: Vec<usize> = keep.iter().map(|&d| a.shape[d]).collect();
                assert_eq!(kept, out_shape, "{line}");
                let ost = strides(&out_shape);
                let mut v = vec![0.0; out_shape.iter().product()];
                for (i, &x) in a.v.iter().enumerate() {
                    let j = unflatten(i, &a.shape);
                    let o: usize = keep.iter().zip(&ost).map(|(&d, &s)| j[d] * s).sum();
                    v[o] = rnd(f32m, v[o] + x);
                }
                T {
                    shape: out_shape,
                    v,
                }
            }
            other => panic!("the evaluator has no {other}: {line}"),
        };
        env.insert(lhs.to_string(), t);
    }
    panic!("no return in the module")
}

fn npy_f64(path: &Path) -> (Vec<usize>, Vec<f64>, bool) {
    let (shape, d) = read_npy_any(path, 1 << 24).unwrap();
    let is64 = matches!(d, NpyData::F64(_));
    (shape, (0..d.len()).map(|i| d.get(i)).collect(), is64)
}

/// Every module, constant, golden and budget of one precision's export, against the suite,
/// and every module run; returns the (op, layout) pairs that have modules.
fn check_precision(prec: &str) -> BTreeSet<(&'static str, &'static str)> {
    let dir = common::scratch("stablehlo-family-export", prec);
    let m = export(prec, &dir, &[]);
    let s = common::family_export::default_suite(prec);
    let by_id = common::family_export::by_id(&s);
    let [listed, unsupported, _] = common::family_export::partition(&m, &s);
    for u in unsupported {
        let c = &by_id[u["id"].as_str().unwrap()].case;
        assert_ne!(c.dtype, c.param_dtype, "{} unsupported in {prec}", u["id"]);
        assert!(u["reason"].as_str().unwrap().contains("parameters"), "{u}");
    }
    let mut seen = BTreeSet::new();
    let (mut compared, mut worst) = (0usize, 0f64);
    for e in listed {
        let id = e["id"].as_str().unwrap();
        let sc = by_id[id];
        let c = &sc.case;
        seen.insert((c.op.name(), c.layout.name()));
        let eps32 = c.eps as f32;
        assert_eq!(e["eps_module"].as_f64(), Some(f64::from(eps32)), "{id}");
        assert_eq!(e["op"], c.op.name());
        let module = std::fs::read_to_string(dir.join(e["module"].as_str().unwrap())).unwrap();
        let (results, consts) = evaluate(&module);
        // constants: the suite's inputs, bit for bit, and nothing else
        assert_eq!(
            consts.keys().map(String::as_str).collect::<Vec<_>>(),
            {
                let mut v = c.op.inputs(c.affine);
                v.sort();
                v
            },
            "{id}"
        );
        for (name, t) in &consts {
            let want = &c.inputs[name];
            assert!(
                t.v.len() == want.len()
                    && t.v
                        .iter()
                        .zip(want)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{id}: constant {name} differs from the suite's input"
            );
        }
        let mut mc = sc.clone();
        mc.case.eps = f64::from(eps32);
        let exact = family_goldens(&mc.case).unwrap();
        let pr = prepare_family(&mc).unwrap();
        let outs = c.op.outputs(c.affine);
        assert_eq!(results.len(), outs.len(), "{id}: one result per output");
        for (i, name) in outs.iter().enumerate() {
            let o = &e["outputs"][i];
            assert_eq!(o["name"], *name);
            let f = format_of(c.dtype_of(name));
            let (gshape, g, g64) = npy_f64(&dir.join(o["golden"].as_str().unwrap()));
            let (bshape, b, b64) = npy_f64(&dir.join(o["budget"].as_str().unwrap()));
            assert_eq!(g64, f == FloatFormat::F64, "{id} {name}: golden dtype");
            assert!(b64, "budgets are f64");
            assert_eq!(gshape, bshape);
            assert_eq!(results[i].shape, gshape, "{id} {name}: result shape");
            let want: Vec<f64> = match &exact[name] {
                Golden::Q(v) => v.iter().map(|e| round(e, f).to_f64()).collect(),
                Golden::Roots(v) => v.iter().map(|e| e.round(f).to_f64()).collect(),
            };
            assert_eq!(g.len(), want.len(), "{id} {name}");
            let u = f.unit_roundoff();
            let k = pr.budgets.gate[name];
            for j in 0..want.len() {
                assert_eq!(
                    g[j].to_bits(),
                    want[j].to_bits(),
                    "{id}: golden {name}[{j}]"
                );
                let bw = k * u * pr.budgets.outputs[name][j].total(u);
                assert_eq!(b[j].to_bits(), bw.to_bits(), "{id}: budget {name}[{j}]");
                let err = (results[i].v[j] - g[j]).abs();
                assert!(
                    err <= b[j],
                    "{id}: the module's {name}[{j}] = {:e}, golden {:e}, |error| {err:e} > budget {:e}",
                    results[i].v[j],
                    g[j],
                    b[j]
                );
                if b[j] > 0.0 {
                    worst = worst.max(err / b[j]);
                }
                compared += 1;
            }
        }
    }
    assert!(compared > 1_000, "{compared}");
    eprintln!(
        "{prec}: {} modules, {compared} elements, worst |error|/budget {worst:.3}",
        listed.len()
    );
    seen
}

#[test]
fn f32_and_f64_exports_are_the_suite_and_their_modules_conform() {
    for prec in ["f32", "f64"] {
        let seen = check_precision(prec);
        // every op and layout of the suite's same-precision cases has a module
        let want: BTreeSet<_> = common::family_export::default_suite(prec)
            .cases
            .iter()
            .filter(|c| c.case.dtype == c.case.param_dtype)
            .map(|c| (c.case.op.name(), c.case.layout.name()))
            .collect();
        assert_eq!(seen, want, "{prec}");
        assert!(seen.contains(&("group_norm_backward", "nhwc")), "{seen:?}");
        assert!(seen.contains(&("layer_norm_backward", "last")), "{seen:?}");
    }
}

/// The same bytes whatever the thread count; f16, mixed precision and an unknown format are
/// exit 2 naming the field, with nothing written.
#[test]
fn deterministic_and_bad_arguments() {
    let a = common::scratch("stablehlo-family-det", "a");
    let b = common::scratch("stablehlo-family-det", "b");
    export("f64", &a, &[("RAYON_NUM_THREADS", "1")]);
    export("f64", &b, &[("RAYON_NUM_THREADS", "2")]);
    let files = common::same_tree(&a, &b, &a);
    assert!(files > 100, "{files}");
    for (dtype, format, field) in [
        ("f16", "stablehlo", "--dtype"),
        ("f16+f32", "stablehlo", "--dtype"),
        ("f32", "stablehlo-text", "--format"),
    ] {
        let out = a.join(format!("x-{dtype}-{format}"));
        let o = common::bnconf(&[
            "export",
            "--family",
            "layer_norm",
            "--format",
            format,
            "--dtype",
            dtype,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{dtype} {format}: {}", text(&o));
        assert!(text(&o).contains(field), "{}", text(&o));
        assert!(!out.exists(), "no partial output for {dtype} {format}");
    }
}
