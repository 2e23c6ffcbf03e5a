//! The generator's random stream (SplitMix64, IEEE +, −, × only: the same bytes on every
//! machine) and rounding a drawn value to a dtype.

use bnconf_spec::exact::round::FloatFormat;

/// SplitMix64's increment.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output of a state.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The uniform of a state ([`Rng::uniform`]).
#[inline(always)]
fn uniform_of(state: u64) -> f64 {
    (mix(state) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// [`Rng::normals`] from state `s`: normal `i` of four draws, states `s + (4i + t)·GAMMA`,
/// `t = 1..=4`, summed in [`Rng::normal`]'s order.
#[inline(always)]
fn normals_at(s: u64, out: &mut [f64]) {
    for (i, o) in out.iter_mut().enumerate() {
        let b = s.wrapping_add((4 * i as u64).wrapping_mul(GAMMA));
        let u1 = uniform_of(b.wrapping_add(GAMMA));
        let u2 = uniform_of(b.wrapping_add(GAMMA.wrapping_mul(2)));
        let u3 = uniform_of(b.wrapping_add(GAMMA.wrapping_mul(3)));
        let u4 = uniform_of(b.wrapping_add(GAMMA.wrapping_mul(4)));
        *o = (u1 + u2 + u3 + u4 - 2.0) * 1.732_050_807_568_877_2;
    }
}

/// [`normals_at`] compiled for AVX-512 (64-bit multiplies and conversions in vectors).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn normals_avx512(s: u64, out: &mut [f64]) {
    normals_at(s, out)
}

/// SplitMix64: a tiny, fixed, portable generator.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GAMMA);
        mix(self.0)
    }
    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    /// Uniform in [a, b).
    pub fn range(&mut self, a: f64, b: f64) -> f64 {
        a + (b - a) * self.uniform()
    }
    /// Approximately standard normal (Irwin–Hall of 4 uniforms, scaled): no libm.
    pub fn normal(&mut self) -> f64 {
        (self.uniform() + self.uniform() + self.uniform() + self.uniform() - 2.0)
            * 1.732_050_807_568_877_2
    }
    /// The stream `n` draws on (as after `n` calls of [`Rng::next_u64`]).
    pub fn skip(&self, n: u64) -> Rng {
        Rng(self.0.wrapping_add(n.wrapping_mul(GAMMA)))
    }
    /// The stream `n` normals on (as after `n` calls of [`Rng::normal`]: four draws each).
    pub fn skip_normals(&self, n: u64) -> Rng {
        self.skip(n.wrapping_mul(4))
    }
    /// `out.len()` values of [`Rng::normal`], in order, and the stream advanced past them: the
    /// same bits as as many calls (the draws of a SplitMix64 stream are independent of one
    /// another, so they are formed many at once: vectorised on CPUs with AVX-512).
    pub fn normals(&mut self, out: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512dq")
        {
            // SAFETY: the features the function is compiled for are present.
            unsafe { normals_avx512(self.0, out) };
            *self = self.skip_normals(out.len() as u64);
            return;
        }
        normals_at(self.0, out);
        *self = self.skip_normals(out.len() as u64);
    }
    /// Integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// Derive an independent stream for a label.
    pub fn fork(&self, label: &str) -> Rng {
        let mut h = self.0 ^ 0xCBF2_9CE4_8422_2325;
        for b in label.bytes() {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
        Rng(h)
    }
}

/// Round an f64 to the dtype (correctly: `as f32` rounds to nearest even).
pub fn to_dtype(x: f64, f: FloatFormat) -> f64 {
    if !x.is_finite() {
        return x;
    }
    match f {
        FloatFormat::F64 => x,
        FloatFormat::F32 => x as f32 as f64,
        // In float arithmetic (`round_f64_to`: exact scalings by powers of two), the value of
        // the exact rounding bit for bit: a negative value that rounds to zero is -0.0, a zero
        // +0.0 (tested against the rational rounding).
        FloatFormat::F16 | FloatFormat::BF16 => {
            let r = crate::formats::family_case::round_f64_to(x, f);
            if r == 0.0 && x < 0.0 {
                -0.0
            } else {
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnconf_spec::exact::round::f64_to_rational;

    /// `to_dtype` to f16 and bf16 is the exact rational rounding, bit for bit (the sign of a
    /// zero included): on each format's midpoints and their neighbours, subnormals, values
    /// that round to zero of both signs, the largest finite value and the overflow boundary,
    /// and on 20,000 random values over the whole f64 range (more with PROPTEST_CASES).
    #[test]
    fn half_rounding_is_the_exact_one() {
        let n: usize = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(20_000, |c: usize| c * 80);
        let mut rng = Rng::new(0x70d7);
        for f in [FloatFormat::F16, FloatFormat::BF16] {
            let exact = |x: f64| {
                bnconf_spec::exact::round::round_rational(&f64_to_rational(x).unwrap(), f).to_f64()
            };
            let p = f.precision() as i32;
            let max = (2.0 - 2f64.powi(1 - p)) * 2f64.powi(f.emax() as i32);
            let sub = 2f64.powi(f.emin() as i32 - p + 1);
            let mut xs = vec![
                0.0,
                -0.0,
                max,
                -max,
                sub,
                -sub,
                sub / 2.0,
                -sub / 2.0,
                1e-300,
            ];
            xs.extend([
                -1e-300,
                max + max * 2f64.powi(-p - 1),
                max * (1.0 + 2f64.powi(-p)),
            ]);
            for k in 0..200 {
                // A midpoint of the format at binade k (ties), and just off it.
                let e = f.emin() as i32 - p + (k % (f.emax() as i32 - f.emin() as i32 + p + 2));
                let mid = 2f64.powi(e) * (1.0 + 2f64.powi(1 - p) * (k as f64 + 0.5));
                for d in [0.0, 2f64.powi(-52), -2f64.powi(-52)] {
                    xs.push(mid * (1.0 + d));
                    xs.push(-mid * (1.0 + d));
                }
            }
            for _ in 0..n {
                let e = (rng.uniform() * 2100.0 - 1070.0) as i32;
                let x = rng.normal() * 2f64.powi(e.clamp(-1074, 1000));
                xs.push(x);
                xs.push(x * 2f64.powi(-(f.emin() as i32).abs() - 20));
            }
            for x in xs {
                let (a, b) = (to_dtype(x, f), exact(x));
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{} of {x:e}: {a:e} vs {b:e}",
                    f.name()
                );
            }
        }
    }

    /// `normals` gives the values of as many calls of `normal`, bit for bit, and leaves the
    /// stream where they leave it (the next draws agree), from any state and for any count
    /// (blocks cut anywhere), on the portable path and, where the CPU has it, the AVX-512 one;
    /// `skip(n)` is `n` calls of `next_u64`.
    #[test]
    fn normals_are_the_calls_of_normal() {
        let mut seeds = Rng::new(0x5eed);
        let mut n = 0;
        for count in (0..70).chain([255, 256, 257, 1000, 4096]) {
            let start = Rng::new(seeds.next_u64());
            let mut one = start.clone();
            let want: Vec<u64> = (0..count).map(|_| one.normal().to_bits()).collect();
            let mut block = start.clone();
            let mut got = vec![0.0; count];
            block.normals(&mut got);
            assert_eq!(got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), want);
            assert_eq!(block.next_u64(), one.next_u64(), "stream after {count}");
            let mut portable = vec![0.0; count];
            normals_at(start.0, &mut portable);
            assert_eq!(
                portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                want
            );
            let mut calls = start.clone();
            (0..count).for_each(|_| {
                calls.next_u64();
            });
            assert_eq!(start.skip(count as u64).0, calls.0);
            n += count;
        }
        // Values of a normal: sums of four uniforms, centred and scaled.
        let mut r = Rng::new(1);
        let mut v = vec![0.0; 1 << 16];
        r.normals(&mut v);
        assert!(v.iter().all(|x| x.abs() <= 2.0 * 1.7320508075688772));
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.02, "{mean}");
        assert!(n > 5000);
    }
}
