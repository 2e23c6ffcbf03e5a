//! `bnconf export --family F --format stablehlo` (docs/FORMAT.md, "Added in bnconf 0.3: the
//! family's StableHLO export"): per family case a self-contained StableHLO module, as
//! [`super::stablehlo`] writes batch_norm's, with the case's exact outputs correctly rounded
//! (`golden/<output>.npy`) and the allowed absolute error per element (`budget/<output>.npy`).
//!
//! StableHLO has no LayerNorm, RMSNorm or GroupNorm op, so the module is the textbook two-pass
//! algorithm in plain ops — what a framework lowers these norms to — and judges how a compiler
//! compiles it (fusion, reassociation of the reductions, its `rsqrt`):
//! * the cells viewed as `[A, G, P, Q]` with one group per `(a, g)`: layout `last` is
//!   `[rows, 1, 1, K]`; group_norm `[N, G, C/G, spatial]` (channels-last layouts transposed to
//!   channel-first first, results transposed back);
//! * `mean = Σx/K`, `d = x − mean` (rms_norm: `d = x`), `var = Σd²/K`, `rstd = rsqrt(var +
//!   eps)`, `xhat = d·rstd`, `y = w·xhat + beta` with `w` = gamma, `1 + gamma` (offset) or 1;
//! * backward, the closed form: `g = w·dy`, `dx = rstd·(g − Σg/K − xhat·Σ(g·xhat)/K)` (rms_norm
//!   without the `Σg/K` term), `dgamma = Σ dy·xhat`, `dbeta = Σ dy` over every row that uses
//!   the parameter;
//! * every output the case has, optional statistics included, in the order of the case's
//!   `outputs`. `eps` is a float constant of the dtype holding float32(eps) exactly (as
//!   batch_norm's `epsilon` attribute), and the goldens are those of that eps.
//!
//! f32 and f64 (the StableHLO export's precisions); every family op and layout has a module.

use crate::error::{ConfError, Result};
use crate::formats::atomic::write_bytes;
use crate::formats::family_case::family_shape;
use crate::formats::npy::{write_npy, NpyData};
use crate::judge::family::prepare_family;
use crate::protocol::stablehlo::{
    dyadic_decimal, hex_blob, mlir_float, tensor_type, to_npy, write_family_manifest, Written,
    FORMAT,
};
use crate::suite::family::{family_ill_posed, format_of, FamilySuite, FamilySuiteCase};
use crate::suite::family_select::FamilySelection;
use bnconf_impl::family::{FamilyCase, FamilyOp, Named, RmsConvention};
use bnconf_spec::exact::round::{f64_to_rational, FloatFormat};
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;

/// The `[A, G, P, Q]` view of a case's cells (see the module docs), and for a channels-last
/// layout the permutation to channel-first.
struct View {
    agpq: [usize; 4],
    /// channels-last: `[0, r−1, 1, …, r−2]`.
    to_channel_first: Option<Vec<usize>>,
    /// The shape after that transpose (the case's shape otherwise).
    first_shape: Vec<usize>,
}

fn view(c: &FamilyCase) -> View {
    let s = &c.shape;
    let r = s.len();
    match c.groups {
        None => {
            let k = c.normalized_ndim.expect("layout last has normalized_ndim");
            let rows: usize = s[..r - k].iter().product();
            let cells: usize = s[r - k..].iter().product();
            View {
                agpq: [rows, 1, 1, cells],
                to_channel_first: None,
                first_shape: s.clone(),
            }
        }
        Some(g) => {
            let (perm, first) = if c.layout.channels_last() {
                let mut p = vec![0, r - 1];
                p.extend(1..r - 1);
                let first = p.iter().map(|&i| s[i]).collect();
                (Some(p), first)
            } else {
                (None, s.clone())
            };
            let (n, ch) = (first[0], first[1]);
            let spatial: usize = first[2..].iter().product();
            View {
                agpq: [n, g, ch / g, spatial],
                to_channel_first: perm,
                first_shape: first,
            }
        }
    }
}

/// Lines of a function body, with fresh SSA names.
struct Body {
    text: String,
    t: FloatFormat,
    next: usize,
}

impl Body {
    fn ty(&self, shape: &[usize]) -> String {
        tensor_type(shape, self.t)
    }
    fn emit(&mut self, rhs: String) -> String {
        let name = format!("%v{}", self.next);
        self.next += 1;
        let _ = writeln!(self.text, "    {name} = {rhs}");
        name
    }
    fn bin(&mut self, op: &str, a: &str, b: &str, shape: &[usize]) -> String {
        let ty = self.ty(shape);
        self.emit(format!("stablehlo.{op} {a}, {b} : {ty}"))
    }
    fn unary(&mut self, op: &str, a: &str, shape: &[usize]) -> String {
        let ty = self.ty(shape);
        self.emit(format!("stablehlo.{op} {a} : {ty}"))
    }
    fn splat(&mut self, v: f64, shape: &[usize]) -> String {
        let ty = self.ty(shape);
        self.emit(format!(
            "stablehlo.constant dense<{}> : {ty}",
            mlir_float(v)
        ))
    }
    fn reshape(&mut self, a: &str, from: &[usize], to: &[usize]) -> String {
        if from == to {
            return a.to_string();
        }
        let (f, t) = (self.ty(from), self.ty(to));
        self.emit(format!("stablehlo.reshape {a} : ({f}) -> {t}"))
    }
    fn transpose(&mut self, a: &str, from: &[usize], perm: &[usize]) -> String {
        let to: Vec<usize> = perm.iter().map(|&i| from[i]).collect();
        let (f, t) = (self.ty(from), self.ty(&to));
        self.emit(format!(
            "stablehlo.transpose {a}, dims = {perm:?} : ({f}) -> {t}"
        ))
    }
    fn broadcast(&mut self, a: &str, from: &[usize], dims: &[usize], to: &[usize]) -> String {
        let (f, t) = (self.ty(from), self.ty(to));
        self.emit(format!(
            "stablehlo.broadcast_in_dim {a}, dims = {dims:?} : ({f}) -> {t}"
        ))
    }
    /// The sum of `a` (shape `from`) over `dims`.
    fn sum(&mut self, a: &str, from: &[usize], dims: &[usize]) -> (String, Vec<usize>) {
        let to: Vec<usize> = (0..from.len())
            .filter(|i| !dims.contains(i))
            .map(|i| from[i])
            .collect();
        let zero = format!("%zero_{}", self.t.name());
        let (f, t, s) = (self.ty(from), self.ty(&to), self.ty(&[]));
        let v = self.emit(format!(
            "stablehlo.reduce({a} init: {zero}) applies stablehlo.add across dimensions = {dims:?} : ({f}, {s}) -> {t}"
        ));
        (v, to)
    }
}

/// Why a family case has no module (`None`: it has one): only the precision.
pub fn unsupported(c: &FamilySuiteCase) -> Option<String> {
    let case = &c.case;
    let (a, p) = (format_of(case.dtype), format_of(case.param_dtype));
    if a != p || !matches!(a, FloatFormat::F32 | FloatFormat::F64) {
        return Some(format!(
            "the StableHLO export takes f32 or f64 (this case: {}{})",
            case.dtype.name(),
            if a != p {
                format!(" with {} parameters", case.param_dtype.name())
            } else {
                String::new()
            }
        ));
    }
    None
}

/// The module text of a supported family case whose eps is already float32(eps) (`mc`); `id`
/// and `eps` are the suite case's, for the header.
pub fn module_text(id: &str, eps: f64, mc: &FamilyCase) -> String {
    let t = format_of(mc.dtype);
    let op = mc.op;
    let v = view(mc);
    let [a, g, p, q] = v.agpq;
    let full = [a, g, p, q];
    let stats = [a, g];
    let centred = op != FamilyOp::RmsNorm && op != FamilyOp::RmsNormBackward;
    let ins = op.inputs(mc.affine);
    let outs = op.outputs(mc.affine);
    let mut b = Body {
        text: String::new(),
        t,
        next: 0,
    };
    let shape_of = |n: &str| family_shape(mc, n);
    let mut head = String::new();
    let _ = writeln!(
        head,
        "// bnconf {} StableHLO export ({FORMAT}): family case {id}",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(
        head,
        "// op {}, layout {}, shape {:?}, dtype {}, affine {}{}{}{}; inputs are the constants below (little-endian hex).",
        op.name(),
        mc.layout.name(),
        mc.shape,
        t.name(),
        mc.affine.name(),
        mc.normalized_ndim.map(|k| format!(", normalized_ndim {k}")).unwrap_or_default(),
        mc.groups.map(|g| format!(", groups {g}")).unwrap_or_default(),
        if centred { String::new() } else { format!(", convention {}", mc.convention.name()) },
    );
    let eps_exact = f64_to_rational(mc.eps).expect("finite eps");
    let _ = writeln!(
        head,
        "// The textbook two-pass algorithm in plain StableHLO ops; eps = float32({eps}) = {} exactly; golden/ and budget/ are for this eps.",
        dyadic_decimal(&eps_exact).expect("dyadic")
    );
    let _ = writeln!(
        head,
        "// Results in this order: {}. Conforming: |result - golden| <= budget, element by element.",
        outs.join(", ")
    );
    let _ = writeln!(head, "module {{");
    let rets: Vec<String> = outs.iter().map(|o| b.ty(&shape_of(o))).collect();
    let _ = writeln!(head, "  func.func @main() -> ({}) {{", rets.join(", "));
    for &n in &ins {
        let _ = writeln!(
            head,
            "    %{n}_c = stablehlo.constant dense<{}> : {}",
            hex_blob(&mc.inputs[n], t),
            b.ty(&shape_of(n))
        );
    }
    let names: Vec<String> = ins.iter().map(|n| format!("%{n}")).collect();
    let cnames: Vec<String> = ins.iter().map(|n| format!("%{n}_c")).collect();
    let types: Vec<String> = ins.iter().map(|n| b.ty(&shape_of(n))).collect();
    // the barrier keeps the compiler from evaluating the module at compile time
    let _ = writeln!(
        head,
        "    {} = stablehlo.optimization_barrier {} : {}",
        names.join(", "),
        cnames.join(", "),
        types.join(", ")
    );
    let _ = writeln!(
        head,
        "    %zero_{} = stablehlo.constant dense<{}> : {}",
        t.name(),
        mlir_float(0.0),
        b.ty(&[])
    );
    // cells to [A, G, P, Q] and back
    let to4 = |b: &mut Body, name: &str| -> String {
        let s = mc.shape.clone();
        let x = match &v.to_channel_first {
            Some(perm) => b.transpose(name, &s, perm),
            None => name.to_string(),
        };
        b.reshape(&x, &v.first_shape, &full)
    };
    let from4 = |b: &mut Body, name: &str| -> String {
        let x = b.reshape(name, &full, &v.first_shape);
        match &v.to_channel_first {
            Some(perm) => {
                let mut inv = vec![0; perm.len()];
                for (i, &pi) in perm.iter().enumerate() {
                    inv[pi] = i;
                }
                b.transpose(&x, &v.first_shape, &inv)
            }
            None => x,
        }
    };
    // a parameter ([C] or the normalized shape) broadcast to [A, G, P, Q], and its reduction
    let (pshape, pdims): (Vec<usize>, Vec<usize>) = if mc.groups.is_some() {
        (vec![g, p], vec![1, 2])
    } else {
        (vec![q], vec![3])
    };
    let param4 = |b: &mut Body, name: &str| -> String {
        let r = b.reshape(name, &shape_of("gamma"), &pshape);
        b.broadcast(&r, &pshape, &pdims, &full)
    };
    let over_params: Vec<usize> = (0..4).filter(|i| !pdims.contains(i)).collect();
    let kc = b.splat(q as f64 * p as f64, &stats);
    let x4 = to4(&mut b, "%x");
    let mean = if centred {
        let (sx, _) = b.sum(&x4, &full, &[2, 3]);
        Some(b.bin("divide", &sx, &kc, &stats))
    } else {
        None
    };
    let d = match &mean {
        Some(m) => {
            let mb = b.broadcast(m, &stats, &[0, 1], &full);
            b.bin("subtract", &x4, &mb, &full)
        }
        None => x4.clone(),
    };
    let d2 = b.bin("multiply", &d, &d, &full);
    let (ss, _) = b.sum(&d2, &full, &[2, 3]);
    let var = b.bin("divide", &ss, &kc, &stats);
    let epsc = b.splat(mc.eps, &stats);
    let qv = b.bin("add", &var, &epsc, &stats);
    let rstd = b.unary("rsqrt", &qv, &stats);
    let rstdb = b.broadcast(&rstd, &stats, &[0, 1], &full);
    let xhat = b.bin("multiply", &d, &rstdb, &full);
    let w = if mc.affine.has_weight() {
        let gb = param4(&mut b, "%gamma");
        Some(if mc.convention == RmsConvention::Offset {
            let one = b.splat(1.0, &full);
            b.bin("add", &one, &gb, &full)
        } else {
            gb
        })
    } else {
        None
    };
    let mut results: Vec<String> = Vec::new();
    let stat_out = |b: &mut Body, s: &str, name: &str| b.reshape(s, &stats, &shape_of(name));
    if !op.is_backward() {
        let mut y = match &w {
            Some(w) => b.bin("multiply", &xhat, w, &full),
            None => xhat.clone(),
        };
        if mc.affine.has_bias() {
            let bb = param4(&mut b, "%beta");
            y = b.bin("add", &y, &bb, &full);
        }
        for &o in &outs {
            results.push(match o {
                "y" => from4(&mut b, &y),
                "mean" => stat_out(&mut b, mean.as_ref().expect("centred"), "mean"),
                "rstd" => stat_out(&mut b, &rstd, "rstd"),
                other => unreachable!("forward output {other}"),
            });
        }
    } else {
        let dy4 = to4(&mut b, "%dy");
        let gdy = match &w {
            Some(w) => b.bin("multiply", &dy4, w, &full),
            None => dy4.clone(),
        };
        let gx = b.bin("multiply", &gdy, &xhat, &full);
        let (sgx, _) = b.sum(&gx, &full, &[2, 3]);
        let mgx = b.bin("divide", &sgx, &kc, &stats);
        let mgxb = b.broadcast(&mgx, &stats, &[0, 1], &full);
        let t1 = b.bin("multiply", &xhat, &mgxb, &full);
        let mut inner = b.bin("subtract", &gdy, &t1, &full);
        if centred {
            let (sg, _) = b.sum(&gdy, &full, &[2, 3]);
            let mg = b.bin("divide", &sg, &kc, &stats);
            let mgb = b.broadcast(&mg, &stats, &[0, 1], &full);
            inner = b.bin("subtract", &inner, &mgb, &full);
        }
        let dx4 = b.bin("multiply", &rstdb, &inner, &full);
        for &o in &outs {
            results.push(match o {
                "dx" => from4(&mut b, &dx4),
                "dgamma" => {
                    let dyx = b.bin("multiply", &dy4, &xhat, &full);
                    let (s, sh) = b.sum(&dyx, &full, &over_params);
                    b.reshape(&s, &sh, &shape_of("dgamma"))
                }
                "dbeta" => {
                    let (s, sh) = b.sum(&dy4, &full, &over_params);
                    b.reshape(&s, &sh, &shape_of("dbeta"))
                }
                other => unreachable!("backward output {other}"),
            });
        }
    }
    let mut s = head;
    s.push_str(&b.text);
    let _ = writeln!(s, "    return {} : {}", results.join(", "), rets.join(", "));
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "}}");
    s
}

/// Write the StableHLO export of a family selection into `dir` (f32 or f64; another precision
/// is an error naming `--dtype`): per case `<id>/module.mlir`, `<id>/golden/<output>.npy`,
/// `<id>/budget/<output>.npy`, then `manifest.json` (`bnconf-stablehlo/1` with `"family"`).
pub fn export(sel: &FamilySelection, s: &FamilySuite, dir: &Path) -> Result<Written> {
    let prec = sel.precision;
    if prec.is_mixed() || !matches!(prec.act, FloatFormat::F32 | FloatFormat::F64) {
        return Err(ConfError::field(
            "--dtype",
            format!("{}: the StableHLO export takes f32 or f64", prec.name()),
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| ConfError::io(dir, e))?;
    let mut w = Written::default();
    let mut listed = Vec::new();
    for c in &s.cases {
        if let Some(why) = unsupported(c) {
            w.unsupported.push((c.id.clone(), why));
            continue;
        }
        let eps32 = c.case.eps as f32;
        let mut mc = c.clone();
        mc.case.eps = f64::from(eps32);
        if let Some(why) = family_ill_posed(&mc.case) {
            w.excluded
                .push((c.id.clone(), format!("with eps = float32(eps): {why}")));
            continue;
        }
        let p = prepare_family(&mc).map_err(|e| ConfError::field(c.id.clone(), e.to_string()))?;
        let gold = p.rounded_goldens();
        let case = &mc.case;
        let t = format_of(case.dtype);
        let cd = dir.join(&c.id);
        for sub in ["golden", "budget"] {
            let d = cd.join(sub);
            std::fs::create_dir_all(&d).map_err(|e| ConfError::io(&d, e))?;
        }
        write_bytes(
            &cd.join("module.mlir"),
            module_text(&c.id, c.case.eps, case).as_bytes(),
        )?;
        let mut outputs = Vec::new();
        let mut k = 0f64;
        for name in case.op.outputs(case.affine) {
            let shape = family_shape(case, name);
            let u = format_of(case.dtype_of(name)).unit_roundoff();
            let gate = p.budgets.gate[name];
            k = k.max(gate);
            let allowed: Vec<f64> = p.budgets.outputs[name]
                .iter()
                .map(|e| gate * u * e.total(u))
                .collect();
            write_npy(
                &cd.join("golden").join(format!("{name}.npy")),
                &shape,
                &to_npy(t, &gold[name]),
            )?;
            write_npy(
                &cd.join("budget").join(format!("{name}.npy")),
                &shape,
                &NpyData::F64(allowed),
            )?;
            outputs.push(json!({
                "name": name,
                "shape": shape,
                "golden": format!("{}/golden/{name}.npy", c.id),
                "budget": format!("{}/budget/{name}.npy", c.id),
            }));
        }
        let eps_exact = f64_to_rational(f64::from(eps32)).expect("finite");
        let mut entry = json!({
            "id": c.id,
            "module": format!("{}/module.mlir", c.id),
            "family": case.op.family().name(),
            "op": case.op.name(),
            "layout": case.layout.name(),
            "shape": case.shape,
            "dtype": t.name(),
            "affine": case.affine.name(),
            "eps": c.case.eps,
            "eps_module": f64::from(eps32),
            "eps_module_exact": dyadic_decimal(&eps_exact).expect("an f32 value is dyadic"),
            "level": c.level.name(),
            "class": c.class,
            "k": k,
            "inputs": case.op.inputs(case.affine),
            "outputs": outputs,
        });
        if let Some(nd) = case.normalized_ndim {
            entry["normalized_ndim"] = json!(nd);
        }
        if let Some(g) = case.groups {
            entry["groups"] = json!(g);
        }
        if matches!(case.op, FamilyOp::RmsNorm | FamilyOp::RmsNormBackward) {
            entry["convention"] = json!(case.convention.name());
        }
        listed.push(entry);
        w.modules += 1;
    }
    write_family_manifest(
        dir,
        FORMAT,
        (sel, s),
        &[
            ("entry", json!("main")),
            ("budget", json!("per element |result - golden| <= budget: k*u*(cond + mag + u*mag2 + underflow/u), f64")),
        ],
        listed,
        &w,
    )?;
    Ok(w)
}
