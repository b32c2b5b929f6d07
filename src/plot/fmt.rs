//! How every number on a figure is written: as a person writes it (`20k`,
//! `1.5 s`, `64`, `250 ms`, `99.5%`, `0`), never `20000.0`. One rule for the
//! axes of mc-plot's SVG and for the page's script: the script carries a
//! line-for-line port of [`human`] and [`tick_digits`] (`web.js`, `human`
//! and `tickDigits`), and `tests/report.rs` runs it against the cases below
//! when `node` is installed.

use serde::Serialize;

/// What an axis (or a tooltip value) counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    /// A count or a rate: `64`, `1.5k`, `20k`, `3.2M`, `1G`.
    #[default]
    Plain,
    /// Milliseconds: `250 ms`, `1.5 s`, `800 µs`.
    Ms,
    /// Seconds: written as [`Unit::Ms`] is (`250 ms` below a second).
    S,
    /// A share from 0 to 1, written in percent: `50%`, `99.5%`.
    Share,
}

/// `v` rounded to `digits` significant digits.
fn round_sig(v: f64, digits: u32) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    // Whole powers of ten only (exact in binary up to 10^22), as the
    // script does, so both round alike.
    let k = digits as i32 - 1 - v.abs().log10().floor() as i32;
    if k >= 0 {
        let s = 10f64.powi(k);
        (v * s).round() / s
    } else {
        let q = 10f64.powi(-k);
        (v / q).round() * q
    }
}

/// `x` (already rounded) with as many decimals as `digits` significant
/// digits need, trailing zeros and a trailing point dropped.
fn plain(x: f64, digits: u32) -> String {
    if x == 0.0 {
        return "0".into();
    }
    let e = x.abs().log10().floor() as i32;
    let decimals = (digits as i32 - 1 - e).clamp(0, 12) as usize;
    let mut s = format!("{x:.decimals$}");
    if s.contains('.') {
        while s.ends_with('0') {
            s.pop();
        }
        if s.ends_with('.') {
            s.pop();
        }
    }
    if s == "-0" {
        s = "0".into();
    }
    s
}

/// `v` in `unit`, to `digits` significant digits (at least 1). The unit's
/// scale is chosen after rounding, so 999.96 ms at 3 digits is `1 s`.
pub fn human(v: f64, unit: Unit, digits: u32) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    // Zero needs no unit: an axis starts at `0`, not `0 ms`.
    if v == 0.0 {
        return "0".into();
    }
    let digits = digits.max(1);
    match unit {
        Unit::Share => format!("{}%", plain(round_sig(v * 100.0, digits), digits)),
        Unit::S => human(v * 1000.0, Unit::Ms, digits),
        Unit::Ms => {
            let r = round_sig(v, digits);
            let (x, suffix) = if r.abs() >= 1000.0 {
                (round_sig(v / 1000.0, digits), " s")
            } else if r != 0.0 && r.abs() < 1.0 {
                (round_sig(v * 1000.0, digits), " µs")
            } else {
                (r, " ms")
            };
            format!("{}{suffix}", plain(x, digits))
        }
        Unit::Plain => {
            let r = round_sig(v, digits);
            let (scale, suffix) = match r.abs() {
                a if a >= 1e9 => (1e9, "G"),
                a if a >= 1e6 => (1e6, "M"),
                a if a >= 1e3 => (1e3, "k"),
                _ => (1.0, ""),
            };
            let x = round_sig(v / scale, digits);
            // 999,999 at 3 digits rounds to 1000k: one scale up.
            if x.abs() >= 1000.0 && scale < 1e9 {
                return human(x * scale, Unit::Plain, digits);
            }
            format!("{}{suffix}", plain(x, digits))
        }
    }
}

/// Significant digits an axis needs so that ticks `step` apart, up to
/// `max_abs`, are written differently: at least 3 (`1.25 s`), more when
/// the axis is zoomed far in (`1.0005k` next to `1.001k`).
pub fn tick_digits(max_abs: f64, step: f64) -> u32 {
    if !(max_abs.is_finite() && step.is_finite()) || step <= 0.0 || max_abs <= 0.0 {
        return 3;
    }
    let d = (max_abs.log10().floor() - step.log10().floor()) as i64 + 1;
    d.clamp(3, 15) as u32
}

/// The cases the Rust rule and the page's port are both held to: value,
/// unit, digits, text (each checked by hand).
pub const CASES: &[(f64, Unit, u32, &str)] = &[
    (20000.0, Unit::Plain, 3, "20k"),
    (64.0, Unit::Plain, 3, "64"),
    (1500.0, Unit::Plain, 3, "1.5k"),
    (16384.0, Unit::Plain, 3, "16.4k"),
    (999_999.0, Unit::Plain, 3, "1M"),
    (2_500_000.0, Unit::Plain, 3, "2.5M"),
    (3e9, Unit::Plain, 3, "3G"),
    (0.0, Unit::Plain, 3, "0"),
    (0.25, Unit::Plain, 3, "0.25"),
    (-1200.0, Unit::Plain, 3, "-1.2k"),
    (250.0, Unit::Ms, 3, "250 ms"),
    (1500.0, Unit::Ms, 3, "1.5 s"),
    (999.96, Unit::Ms, 3, "1 s"),
    (0.5, Unit::Ms, 3, "500 µs"),
    (0.0, Unit::Ms, 3, "0"),
    (-0.0, Unit::S, 3, "0"),
    (1853.214, Unit::Ms, 7, "1.853214 s"),
    (12.345, Unit::Ms, 3, "12.3 ms"),
    (1.5, Unit::S, 3, "1.5 s"),
    (0.25, Unit::S, 3, "250 ms"),
    (120.0, Unit::S, 3, "120 s"),
    (0.5, Unit::Share, 3, "50%"),
    (0.995, Unit::Share, 3, "99.5%"),
    (1.0, Unit::Share, 3, "100%"),
    (f64::NAN, Unit::Ms, 3, "-"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_as_a_person_writes_them() {
        for &(v, unit, digits, want) in CASES {
            assert_eq!(human(v, unit, digits), want, "{v} {unit:?} {digits}");
        }
    }

    #[test]
    fn tick_digits_tell_neighbouring_ticks_apart() {
        // 0..4000 in steps of 500: 3 digits do (`3.5k`).
        assert_eq!(tick_digits(4000.0, 500.0), 3);
        // 1000..1001 in steps of 0.2: 1000.2 needs 5 digits.
        assert_eq!(tick_digits(1001.0, 0.2), 5);
        assert_eq!(human(1000.2, Unit::Plain, 5), "1.0002k");
        assert_eq!(human(1000.4, Unit::Plain, 5), "1.0004k");
        assert_eq!(tick_digits(0.0, 1.0), 3);
    }
}
