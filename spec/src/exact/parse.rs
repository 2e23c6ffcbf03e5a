//! Literals of FORMAT.md: decimals (`-2.25`, `1e-5`), C99 hex floats (`0x1.8p+1`), rationals
//! (`p/q`), and exact field values `A + B*sqrt(D)`.
//!
//! Sizes are bounded before anything is allocated: a literal longer than
//! [`Limits::max_len`] or with a decimal / binary exponent beyond [`Limits::max_exponent`] is
//! refused, so `1e999999999` costs nothing.

use super::{BigInt, QSqrt, Rational};
use num_traits::{Num, One, Signed, Zero};
use std::fmt;

/// Bounds on the size of exact literals.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest literal accepted, in bytes.
    pub max_len: usize,
    /// Largest |exponent| accepted (decimal exponent for decimals, binary for hex floats).
    pub max_exponent: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_len: 4096,
            max_exponent: 10_000,
        }
    }
}

/// Why a literal was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// The offending literal (truncated to 80 characters).
    pub literal: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid number {:?}: {}", self.literal, self.reason)
    }
}
impl std::error::Error for ParseError {}

fn err(s: &str, reason: impl Into<String>) -> ParseError {
    let literal: String = s.chars().take(80).collect();
    ParseError {
        literal,
        reason: reason.into(),
    }
}

/// Parse a rational literal with the default [`Limits`].
pub fn parse_rational(s: &str) -> Result<Rational, ParseError> {
    parse_rational_with(s, &Limits::default())
}

/// Parse a rational literal: decimal, hex float or `p/q`.
pub fn parse_rational_with(s: &str, lim: &Limits) -> Result<Rational, ParseError> {
    if s.len() > lim.max_len {
        return Err(err(s, format!("longer than {} bytes", lim.max_len)));
    }
    let t = s.trim();
    if t.is_empty() {
        return Err(err(s, "empty"));
    }
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return Err(err(s, "not finite"));
    }
    if let Some((p, q)) = t.split_once('/') {
        let p = parse_int(p.trim()).ok_or_else(|| err(s, "numerator is not an integer"))?;
        let q = parse_int(q.trim()).ok_or_else(|| err(s, "denominator is not an integer"))?;
        if q.is_zero() {
            return Err(err(s, "zero denominator"));
        }
        return Ok(Rational::new(p, q));
    }
    let (neg, rest) = match t.as_bytes()[0] {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if rest.len() > 2 && (rest.starts_with("0x") || rest.starts_with("0X")) {
        parse_hex(&rest[2..], lim).map_err(|r| err(s, r))?
    } else {
        parse_decimal(rest, lim).map_err(|r| err(s, r))?
    };
    Ok(if neg { -v } else { v })
}

fn parse_int(s: &str) -> Option<BigInt> {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    BigInt::from_str_radix(s.strip_prefix('+').unwrap_or(s), 10).ok()
}

fn parse_exp(e: &str, lim: &Limits) -> Result<i64, String> {
    let digits = e.strip_prefix(['-', '+']).unwrap_or(e);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("malformed exponent".into());
    }
    let d = digits.trim_start_matches('0');
    if d.len() > 18 {
        return Err(format!("exponent beyond the limit of {}", lim.max_exponent));
    }
    let v: i64 = d.parse().unwrap_or(0);
    let v = if e.starts_with('-') { -v } else { v };
    Ok(v)
}

fn parse_decimal(s: &str, lim: &Limits) -> Result<Rational, String> {
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], parse_exp(&s[i + 1..], lim)?),
        None => (s, 0),
    };
    let (ip, fp) = match mant.split_once('.') {
        Some((a, b)) => (a, b),
        None => (mant, ""),
    };
    if ip.is_empty() && fp.is_empty() {
        return Err("no digits".into());
    }
    if !ip.bytes().chain(fp.bytes()).all(|b| b.is_ascii_digit()) {
        return Err("not a number".into());
    }
    let digits = format!("{ip}{fp}");
    let n = BigInt::from_str_radix(if digits.is_empty() { "0" } else { &digits }, 10).unwrap();
    let e10 = exp - fp.len() as i64;
    if n.is_zero() {
        return Ok(Rational::zero());
    }
    // Effective magnitude exponent, bounded before 10^|e10| is built.
    let mag = exp + ip.trim_start_matches('0').len() as i64;
    if exp.abs() > lim.max_exponent || mag.abs() > lim.max_exponent {
        return Err(format!("exponent beyond the limit of {}", lim.max_exponent));
    }
    let p = num_traits::pow(BigInt::from(10), e10.unsigned_abs() as usize);
    Ok(if e10 >= 0 {
        Rational::from_integer(n * p)
    } else {
        Rational::new(n, p)
    })
}

fn parse_hex(s: &str, lim: &Limits) -> Result<Rational, String> {
    let (mant, exp) = match s.find(['p', 'P']) {
        Some(i) => (&s[..i], parse_exp(&s[i + 1..], lim)?),
        None => (s, 0),
    };
    let (ip, fp) = match mant.split_once('.') {
        Some((a, b)) => (a, b),
        None => (mant, ""),
    };
    if ip.is_empty() && fp.is_empty() {
        return Err("no hex digits".into());
    }
    if !ip.bytes().chain(fp.bytes()).all(|b| b.is_ascii_hexdigit()) {
        return Err("not a hex float".into());
    }
    let digits = format!("{ip}{fp}");
    let n = BigInt::from_str_radix(&digits, 16).unwrap();
    if n.is_zero() {
        return Ok(Rational::zero());
    }
    let e2 = exp - 4 * fp.len() as i64;
    if exp.abs() > lim.max_exponent || (exp + 4 * ip.len() as i64).abs() > lim.max_exponent {
        return Err(format!("exponent beyond the limit of {}", lim.max_exponent));
    }
    Ok(super::mul_pow2(&Rational::from_integer(n), e2))
}

/// Parse an exact value: a rational literal, or `A + B*sqrt(D)` (also `A - B*sqrt(D)`,
/// `B*sqrt(D)`, `sqrt(D)`), with `D > 0`.
pub fn parse_exact(s: &str) -> Result<QSqrt, ParseError> {
    parse_exact_with(s, &Limits::default())
}

/// [`parse_exact`] with explicit limits.
pub fn parse_exact_with(s: &str, lim: &Limits) -> Result<QSqrt, ParseError> {
    if s.len() > lim.max_len {
        return Err(err(s, format!("longer than {} bytes", lim.max_len)));
    }
    let t = s.trim();
    let Some(open) = t.find("sqrt(") else {
        return parse_rational_with(t, lim).map(QSqrt::rational);
    };
    let close = t
        .rfind(')')
        .filter(|&c| c > open && t[c + 1..].trim().is_empty());
    let close = close.ok_or_else(|| err(s, "expected `sqrt(D)` at the end"))?;
    let d = parse_rational_with(&t[open + 5..close], lim)?;
    if !d.is_positive() {
        return Err(err(s, "radicand D must be > 0"));
    }
    // Before "sqrt(": "[A (+|-)] [B*]"
    let head = t[..open].trim_end();
    let (head, coef_str) = match head.strip_suffix('*') {
        Some(h) => {
            let h = h.trim_end();
            // B is the last term: find the split between A and B at a top-level + or -.
            let cut = split_last_term(h);
            (&h[..cut], h[cut..].trim())
        }
        None => (head, ""),
    };
    // head now ends with an optional sign joining A and B.
    let head = head.trim_end();
    let (a_str, sign) = if let Some(a) = head.strip_suffix('+') {
        (a.trim(), 1)
    } else if let Some(a) = head.strip_suffix('-') {
        (a.trim(), -1)
    } else if head.is_empty() {
        (head, 1)
    } else {
        return Err(err(
            s,
            "expected `A + B*sqrt(D)`: `+` or `-` missing before the sqrt term",
        ));
    };
    let a = if a_str.is_empty() {
        Rational::zero()
    } else {
        parse_rational_with(a_str, lim)?
    };
    let mut b = if coef_str.is_empty() {
        Rational::one()
    } else {
        parse_rational_with(coef_str, lim)?
    };
    if sign < 0 {
        b = -b;
    }
    Ok(QSqrt::new(a, b, d))
}

/// Index where the last term of `A + B` (or `A - B`, `A + -B`) starts; 0 if there is one term.
fn split_last_term(h: &str) -> usize {
    let bytes = h.as_bytes();
    // Scan backwards for a '+' or '-' that is not part of an exponent or a leading sign of B.
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        let c = bytes[i];
        if c == b'+' || c == b'-' {
            let prev = h[..i].trim_end();
            if prev.is_empty() {
                return 0;
            }
            let pc = prev.as_bytes()[prev.len() - 1].to_ascii_lowercase();
            if pc == b'e' || pc == b'p' {
                // The sign of an exponent (`1e-5`, `0x1p-3`) continues the number; but in a
                // hex literal `e` is a digit (`0x1e - B`), and `p` marks no decimal exponent.
                let token = prev.rsplit([' ', '\t', '+', '-']).next().unwrap_or("");
                let hex = token.to_ascii_lowercase().starts_with("0x");
                if hex == (pc == b'p') {
                    continue;
                }
                return i + 1;
            }
            if pc == b'+' || pc == b'-' {
                // "A + -B": B starts at this sign
                return i;
            }
            return i + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    fn q(n: i64, d: i64) -> Rational {
        Rational::new(BigInt::from(n), BigInt::from(d))
    }
    #[test]
    fn literals() {
        assert_eq!(parse_rational("-2.25").unwrap(), q(-9, 4));
        assert_eq!(parse_rational("1e-5").unwrap(), q(1, 100000));
        assert_eq!(parse_rational("0x1.8p+1").unwrap(), q(3, 1));
        assert_eq!(parse_rational("-0x1p-2").unwrap(), q(-1, 4));
        assert_eq!(parse_rational("6/-4").unwrap(), q(-3, 2));
        assert_eq!(parse_rational(".5").unwrap(), q(1, 2));
        assert_eq!(parse_rational("12.5E2").unwrap(), q(1250, 1));
        assert_eq!(parse_rational("0e999999999").unwrap(), q(0, 1));
        assert!(parse_rational("1e999999999").is_err());
        assert!(parse_rational("1e-99999999999999999999999").is_err());
        assert!(parse_rational("nan").is_err());
        assert!(parse_rational("-inf").is_err());
        assert!(parse_rational("1/0").is_err());
        assert!(parse_rational("1.2.3").is_err());
        assert!(parse_rational("").is_err());
    }
    /// Every limit is inclusive: a literal of exactly `max_len` bytes, an exponent of exactly
    /// `max_exponent` (the written one, and the magnitude with the integer digits counted)
    /// are read; one more is refused, with the reason.
    #[test]
    fn limits_are_inclusive() {
        let lim = Limits {
            max_len: 8,
            max_exponent: 10,
        };
        let ok = |s: &str| parse_rational_with(s, &lim).unwrap_or_else(|e| panic!("{s}: {e}"));
        let reason = |s: &str| parse_rational_with(s, &lim).unwrap_err().reason;
        assert_eq!(ok("12345678"), q(12345678, 1));
        assert_eq!(reason("123456789"), "longer than 8 bytes");
        assert_eq!(reason("123456789012"), "longer than 8 bytes");
        // The decimal exponent as written, and the magnitude: the value is below 10^(exponent
        // + integer digits).
        let beyond = "exponent beyond the limit of 10";
        assert_eq!(ok("1e9"), q(1_000_000_000, 1)); // magnitude 10
        assert_eq!(reason("1e10"), beyond); // magnitude 11
        assert_eq!(ok("1e-10"), q(1, 10_000_000_000)); // exponent 10
        assert_eq!(reason("1e-11"), beyond); // exponent 11
        assert_eq!(reason("123e-11"), beyond); // exponent 11, magnitude 8
        assert_eq!(reason("123e8"), beyond); // magnitude 11
        let wide = Limits {
            max_len: 64,
            max_exponent: 10,
        };
        assert_eq!(
            parse_rational_with("1234567890", &wide).unwrap(),
            q(1234567890, 1)
        );
        assert_eq!(
            parse_rational_with("12345678901", &wide)
                .unwrap_err()
                .reason,
            beyond
        );
        // Hex floats: the binary exponent as written, and with 4 bits per integer digit.
        let hex = Limits {
            max_len: 64,
            max_exponent: 16,
        };
        let h = |s: &str| parse_rational_with(s, &hex).map_err(|e| e.reason);
        let beyond = Err("exponent beyond the limit of 16".to_string());
        assert_eq!(h("0x1p12"), Ok(q(4096, 1))); // 12 + 4
        assert_eq!(h("0x1p13"), beyond); // 13 + 4
        assert_eq!(h("0x123p4"), Ok(q(0x1230, 1))); // 4 + 4*3
        assert_eq!(h("0x123p5"), beyond); // 5 + 4*3
        assert_eq!(h("0x1p-16"), Ok(q(1, 65536))); // exponent 16
        assert_eq!(h("0x1p-17"), beyond); // exponent 17
        assert_eq!(h("0x123p-8"), Ok(q(0x123, 256)));
        // The exact-value form, on its whole length.
        let lim = Limits {
            max_len: 13,
            max_exponent: 10,
        };
        assert_eq!(
            parse_exact_with("1 + 2*sqrt(3)", &lim).unwrap(),
            QSqrt::new(q(1, 1), q(2, 1), q(3, 1))
        );
        for long in ["1 + 2*sqrt(3) ", "1 + 20*sqrt(3)", "10 + 20*sqrt(30)"] {
            assert_eq!(
                parse_exact_with(long, &lim).unwrap_err().reason,
                "longer than 13 bytes",
                "{long:?}"
            );
        }
    }

    /// Exponents of up to 18 digits are read (and then held to the limit, except for a zero
    /// significand, which is 0 whatever its exponent); 19 digits are refused outright.
    #[test]
    fn exponent_digits() {
        let e18 = format!("0e{}", "9".repeat(18));
        assert_eq!(parse_rational(&e18).unwrap(), q(0, 1));
        assert_eq!(
            parse_rational(&format!("0e{}", "0".repeat(30))).unwrap(),
            q(0, 1)
        );
        let e19 = format!("0e{}", "9".repeat(19));
        assert_eq!(
            parse_rational(&e19).unwrap_err().reason,
            "exponent beyond the limit of 10000"
        );
    }

    /// Malformed literals are refused with the reason, and the message names the literal.
    #[test]
    fn malformed_literals() {
        let reason = |s: &str| parse_rational(s).unwrap_err().reason;
        for s in ["1e", "1e+", "1e5x", "1e-", "0x1p", "0x1p+z", "2e1.5"] {
            assert!(
                reason(s).contains("exponent") || reason(s) == "not a number",
                "{s}: {}",
                reason(s)
            );
        }
        assert_eq!(reason("1e"), "malformed exponent");
        assert_eq!(reason("1e5x"), "malformed exponent");
        assert_eq!(reason("0x1p"), "malformed exponent");
        assert_eq!(reason("1_000/3"), "numerator is not an integer");
        assert_eq!(reason("3/1_000"), "denominator is not an integer");
        assert_eq!(reason("+/3"), "numerator is not an integer");
        assert_eq!(reason("0x"), "not a number");
        assert_eq!(reason("0xg"), "not a hex float");
        assert_eq!(
            parse_rational("1/0").unwrap_err().to_string(),
            "invalid number \"1/0\": zero denominator"
        );
        for s in ["sqrt(2)x", "1 + sqrt(2) 3", "1 + 2*sqrt(3)) + 1"] {
            assert!(parse_exact(s).is_err(), "{s}");
        }
    }

    #[test]
    fn exact_values_round_trip() {
        for s in [
            "-3/4 + 5/16*sqrt(17/4)",
            "2",
            "0 + -1/3*sqrt(5)",
            "7/2 + 1*sqrt(3)",
        ] {
            let v = parse_exact(s).unwrap();
            assert_eq!(v.to_string(), s, "round trip of {s}");
        }
        assert_eq!(
            parse_exact("1 - 2*sqrt(3)").unwrap(),
            QSqrt::new(q(1, 1), q(-2, 1), q(3, 1))
        );
        assert_eq!(
            parse_exact("-sqrt(3)").unwrap(),
            QSqrt::new(q(0, 1), q(-1, 1), q(3, 1))
        );
        assert_eq!(
            parse_exact("1e-3 + 2.5e1*sqrt(2)").unwrap(),
            QSqrt::new(q(1, 1000), q(25, 1), q(2, 1))
        );
        assert_eq!(parse_exact("1 + 2*sqrt(4)").unwrap(), QSqrt::int(5));
        assert!(parse_exact("1 + 2*sqrt(-4)").is_err());
        assert!(parse_exact("1 + 2*sqrt(3").is_err());
    }
}
