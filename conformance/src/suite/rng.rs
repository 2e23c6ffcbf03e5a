//! The generator's random stream (SplitMix64, IEEE +, −, × only: the same bytes on every
//! machine) and rounding a drawn value to a dtype.

use bnconf_spec::exact::round::{f64_to_rational, FloatFormat};

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
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
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
        FloatFormat::F16 | FloatFormat::BF16 => {
            let r =
                bnconf_spec::exact::round::round_rational(&f64_to_rational(x).expect("finite"), f);
            r.to_f64()
        }
    }
}
