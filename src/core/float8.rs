//! The 8-bit float formats of ONNX (FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
//! FLOAT8E5M2FNUZ; "FP8 Formats for Deep Learning", Micikevicius et al.), each
//! element held as its bit pattern: sign, exponent, mantissa. Conversions follow
//! the ONNX Cast text: round to nearest, ties to even; a value beyond the largest
//! finite one saturates to it, or with `saturate` off becomes infinity (E5M2)
//! or NaN (the others, which have no infinity).

use super::DType;

/// What a format does with its special values.
#[derive(Clone, Copy, PartialEq)]
enum Special {
    /// As IEEE: the top exponent holds the infinities and NaNs (E5M2).
    Ieee,
    /// No infinities; the pattern of all ones is NaN (E4M3FN).
    Finite,
    /// No infinities and no -0: the pattern of -0, 0x80, is the one NaN (FNUZ).
    FiniteUnsignedZero,
}

/// A format: mantissa width, exponent bias, special values.
#[derive(Clone, Copy)]
struct Format {
    man: u32,
    bias: i32,
    special: Special,
}

fn format(dtype: DType) -> Option<Format> {
    let (man, bias, special) = match dtype {
        DType::F8E4M3FN => (3, 7, Special::Finite),
        DType::F8E4M3FNUZ => (3, 8, Special::FiniteUnsignedZero),
        DType::F8E5M2 => (2, 15, Special::Ieee),
        DType::F8E5M2FNUZ => (2, 16, Special::FiniteUnsignedZero),
        _ => return None,
    };
    Some(Format { man, bias, special })
}

impl Format {
    /// The magnitude of the largest finite value (as a pattern without sign).
    fn max(self) -> u8 {
        match self.special {
            // The pattern below the top exponent's first (infinity).
            Special::Ieee => (0x7F >> self.man << self.man) - 1,
            Special::Finite => 0x7E,
            Special::FiniteUnsignedZero => 0x7F,
        }
    }

    /// The value of a pattern without its sign bit (NaN and infinity excluded).
    fn magnitude(self, m: u8) -> f64 {
        let (e, frac) = ((m >> self.man) as i32, (m & ((1 << self.man) - 1)) as f64);
        let ulp = |e: i32| 2f64.powi(e - self.bias - self.man as i32);
        match e {
            0 => frac * ulp(1),
            e => (frac + (1u32 << self.man) as f64) * ulp(e),
        }
    }

    fn decode(self, code: u8) -> f64 {
        let (negative, m) = (code & 0x80 != 0, code & 0x7F);
        let top = 0x7F >> self.man << self.man;
        let v = match self.special {
            Special::FiniteUnsignedZero if code == 0x80 => return f64::NAN,
            Special::Finite if m == 0x7F => return f64::NAN,
            Special::Ieee if m > top => return f64::NAN,
            Special::Ieee if m == top => f64::INFINITY,
            _ => self.magnitude(m),
        };
        if negative {
            -v
        } else {
            v
        }
    }

    fn encode(self, x: f64, saturate: bool) -> u8 {
        let unsigned_zero = self.special == Special::FiniteUnsignedZero;
        let nan = if unsigned_zero { 0x80 } else { 0x7F };
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return if unsigned_zero { nan } else { sign | nan };
        }
        let max = self.max();
        let overflow = match (saturate, self.special) {
            (true, _) => sign | max,
            (false, Special::Ieee) => sign | (max + 1),
            (false, Special::Finite) => sign | nan,
            (false, Special::FiniteUnsignedZero) => nan,
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow;
        }
        // The largest pattern at most `a` (patterns ascend with their values),
        // then the nearer of it and the next; past the largest finite value
        // the next is one step of its spacing beyond.
        let (mut lo, mut hi) = (0u8, max);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if self.magnitude(mid) <= a {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let below = self.magnitude(lo);
        let above = if lo == max {
            2.0 * below - self.magnitude(max - 1)
        } else {
            self.magnitude(lo + 1)
        };
        let up = a - below > above - a || (a - below == above - a && lo & 1 == 1);
        match (up, lo + up as u8) {
            (_, m) if m > max => overflow,
            (_, 0) if unsigned_zero => 0,
            (_, m) => sign | m,
        }
    }
}

/// Whether `dtype` is one of the 8-bit float formats.
pub fn is_float8(dtype: DType) -> bool {
    format(dtype).is_some()
}

/// The value of each pattern of a float8 `dtype`.
pub fn decode(dtype: DType, codes: &[u8]) -> Vec<f64> {
    let f = format(dtype).expect("a float8 dtype");
    codes.iter().map(|&c| f.decode(c)).collect()
}

/// The pattern of each value in a float8 `dtype` (see the module text).
pub fn encode(dtype: DType, values: &[f64], saturate: bool) -> Vec<u8> {
    let f = format(dtype).expect("a float8 dtype");
    values.iter().map(|&x| f.encode(x, saturate)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [DType; 4] = [
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
    ];

    #[test]
    fn every_pattern_round_trips() {
        for d in ALL {
            let codes: Vec<u8> = (0..=255).collect();
            let values = decode(d, &codes);
            for sat in [true, false] {
                let back = encode(d, &values, sat);
                for (&c, (&v, &b)) in codes.iter().zip(values.iter().zip(&back)) {
                    if v.is_nan() {
                        assert!(decode(d, &[b])[0].is_nan(), "{d} {c:#x}");
                    } else if !(v.is_infinite() && sat) {
                        assert_eq!(b, c, "{d} {c:#x} = {v}");
                    }
                }
            }
        }
    }

    #[test]
    fn range_ties_and_specials_follow_the_onnx_cast_table() {
        let enc = |d, x: f64, sat| encode(d, &[x], sat)[0];
        let (fn_, fnuz, e5, e5uz) = (ALL[0], ALL[1], ALL[2], ALL[3]);
        // Largest finite values: 448, 240, 57344, 57344.
        assert_eq!(decode(fn_, &[0x7E, 0x38]), vec![448.0, 1.0]);
        assert_eq!(decode(fnuz, &[0x7F]), vec![240.0]);
        assert_eq!(decode(e5, &[0x7B, 0x7C]), vec![57344.0, f64::INFINITY]);
        assert_eq!(decode(e5uz, &[0x7F]), vec![57344.0]);
        // 464 is halfway between 448 (even) and the 480 E4M3FN lacks.
        assert_eq!(enc(fn_, 464.0, false), 0x7E);
        assert_eq!(enc(fn_, 465.0, true), 0x7E);
        assert!(decode(fn_, &[enc(fn_, 465.0, false)])[0].is_nan());
        // 61440 is halfway between 57344 (odd) and 65536: it rounds up, beyond.
        assert_eq!(enc(e5, 61440.0, true), 0x7B);
        assert_eq!(enc(e5, 61440.0, false), 0x7C);
        assert_eq!(enc(e5, f64::NEG_INFINITY, false), 0xFC);
        assert_eq!(enc(e5, f64::NEG_INFINITY, true), 0xFB);
        assert_eq!(enc(e5uz, f64::INFINITY, false), 0x80);
        // -0 and NaN: FNUZ has one zero, and 0x80 is its NaN.
        assert_eq!(enc(fn_, -0.0, true), 0x80);
        assert_eq!(enc(fnuz, -0.0, true), 0x00);
        assert_eq!(enc(fnuz, -1e-9, true), 0x00);
        assert_eq!(enc(fnuz, f64::NAN, true), 0x80);
        // Subnormals: 2^-9 is E4M3FN's least; 2^-10, the tie, goes to even 0.
        assert_eq!(enc(fn_, 2f64.powi(-9), true), 0x01);
        assert_eq!(enc(fn_, 2f64.powi(-10), true), 0x00);
        assert_eq!(enc(fn_, 1.5 * 2f64.powi(-9), true), 0x02);
    }
}
