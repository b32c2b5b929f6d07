//! Every clap value parser for numbers, durations, percentages, URLs,
//! headers and JSON objects, so every tool refuses a bad value in the same
//! words: "`VALUE` is not a positive number", "`VALUE` seconds is more than
//! the limit of …". Each parser is a plain `fn(&str) -> Result<T, String>`
//! for `#[arg(value_parser = …)]`; clap adds the option's name.
//!
//! Values are trimmed before parsing, so `--weights "1, 2"` works with a
//! comma delimiter. `nan` and the infinities are never a valid value: every
//! number here ends up in a schedule, a model or a file.

use serde_json::{Map, Value};

/// The longest time any option accepts, in seconds (about 11.6 days):
/// larger values are a usage error rather than an overflow.
pub const MAX_SECONDS: f64 = 1e6;

/// The longest delay in ms (a year): a larger one is a typo, and `inf`
/// would be written to a trace as 2^64 - 1.
pub const MAX_DELAY_MS: f64 = 365.0 * 24.0 * 3600.0 * 1000.0;

fn parse(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Any finite number.
pub fn number(s: &str) -> Result<f64, String> {
    parse(s).ok_or_else(|| format!("`{s}` is not a number"))
}

/// A finite number > 0.
pub fn positive(s: &str) -> Result<f64, String> {
    parse(s)
        .filter(|v| *v > 0.0)
        .ok_or_else(|| format!("`{s}` is not a positive number"))
}

/// A finite number >= 0.
pub fn non_negative(s: &str) -> Result<f64, String> {
    parse(s)
        .filter(|v| *v >= 0.0)
        .ok_or_else(|| format!("`{s}` is not a non-negative number"))
}

/// A fraction in [0, 1].
pub fn fraction(s: &str) -> Result<f64, String> {
    parse(s)
        .filter(|v| (0.0..=1.0).contains(v))
        .ok_or_else(|| format!("`{s}` is not between 0 and 1"))
}

/// A share in (0, 1]: a part that cannot be empty.
pub fn share(s: &str) -> Result<f64, String> {
    parse(s)
        .filter(|v| *v > 0.0 && *v <= 1.0)
        .ok_or_else(|| format!("`{s}` is not more than 0 and at most 1"))
}

/// Percentage points in [0, 100].
pub fn percentage_points(s: &str) -> Result<f64, String> {
    parse(s)
        .filter(|v| (0.0..=100.0).contains(v))
        .ok_or_else(|| format!("`{s}` is not between 0 and 100 percentage points"))
}

/// A request rate (per second) of at least one per [`MAX_SECONDS`], so a
/// schedule built from it ends.
pub fn rate(s: &str) -> Result<f64, String> {
    let v = positive(s)?;
    if v < 1.0 / MAX_SECONDS {
        return Err(format!(
            "`{s}` requests/s is below the limit of {:e}",
            1.0 / MAX_SECONDS
        ));
    }
    Ok(v)
}

/// Seconds in (0, [`MAX_SECONDS`]].
pub fn positive_seconds(s: &str) -> Result<f64, String> {
    within_limit(s, positive(s)?)
}

/// Seconds in [0, [`MAX_SECONDS`]].
pub fn non_negative_seconds(s: &str) -> Result<f64, String> {
    within_limit(s, non_negative(s)?)
}

fn within_limit(s: &str, v: f64) -> Result<f64, String> {
    if v > MAX_SECONDS {
        Err(format!(
            "`{s}` seconds is more than the limit of {MAX_SECONDS:.0} s (about 11.6 days)"
        ))
    } else {
        Ok(v)
    }
}

/// A delay in ms in [0, [`MAX_DELAY_MS`]].
pub fn delay_ms(s: &str) -> Result<f64, String> {
    let v = non_negative(s)?;
    if v > MAX_DELAY_MS {
        Err(format!(
            "`{s}` ms is more than the limit of {MAX_DELAY_MS:.0} ms (a year)"
        ))
    } else {
        Ok(v)
    }
}

/// Three finite numbers `A,B,C` (polynomial coefficients, highest power
/// first).
pub fn three_numbers(s: &str) -> Result<[f64; 3], String> {
    let bad = || format!("`{s}` is not three numbers A,B,C");
    let v: Vec<f64> = s
        .split(',')
        .map(parse)
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    <[f64; 3]>::try_from(v).map_err(|_| bad())
}

/// `http://host:port[/v1]` or `https://…`: a URL without a scheme would
/// fail every request as a transport error, so it is a usage error here.
pub fn url(s: &str) -> Result<String, String> {
    let lower = s.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(s.to_string()),
        Some(_) => Err(format!("`{s}` has no host: expected http://HOST:PORT")),
        None => Err(format!(
            "`{s}` has no scheme: expected http://HOST:PORT (e.g. http://{s})"
        )),
    }
}

/// Query parameters whose values are credentials (compared without case,
/// `-` and `_`): `?api_key=…`, `?key=…`, `?token=…`, `?access_token=…`.
const SECRET_QUERY_KEYS: [&str; 12] = [
    "apikey",
    "key",
    "token",
    "accesstoken",
    "authtoken",
    "auth",
    "secret",
    "password",
    "passwd",
    "sig",
    "signature",
    "xapikey",
];

/// The parts of `url` that are credentials: its userinfo
/// (`user:password` of `scheme://user:password@host`) and the values of
/// credential query parameters (`SECRET_QUERY_KEYS`). The one rule for
/// what in a URL is secret: mc-replay's redactor and mc-report's reading
/// of older run descriptions both use it.
pub fn url_secrets(url: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let Some((_, rest)) = url.split_once("://") else {
        return out;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if let Some((info, _)) = authority.rsplit_once('@') {
        if !info.is_empty() {
            out.push(info);
        }
    }
    let query = rest
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or_default());
    for pair in query.unwrap_or_default().split(['&', ';']) {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        let k: String = k
            .chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect();
        if !v.is_empty() && SECRET_QUERY_KEYS.contains(&k.as_str()) {
            out.push(v);
        }
    }
    out
}

/// `url` with every part [`url_secrets`] names replaced by `***`.
pub fn redacted_url(url: &str) -> String {
    let mut out = url.to_string();
    let mut secrets = url_secrets(url);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        out = out.replace(s, "***");
    }
    out
}

/// `NAME:VALUE`, both trimmed, checked by the `http` crate's rules (the
/// ones the HTTP client applies when it sends them). The name keeps the
/// user's spelling: servers that log headers show what was asked for.
pub fn header(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once(':')
        .ok_or_else(|| format!("`{s}` is not a header: expected NAME:VALUE"))?;
    let (k, v) = (k.trim(), v.trim());
    if http::HeaderName::from_bytes(k.as_bytes()).is_err() {
        return Err(format!("`{k}` is not a header name"));
    }
    // The `http` crate allows obs-text (bytes >= 0x80) in values, whose
    // meaning depends on the server: ASCII only, so the value reads the same
    // in every client and log.
    if !v.is_ascii() || http::HeaderValue::from_str(v).is_err() {
        return Err(format!("the value of `{k}` must be printable ASCII"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// A JSON object (`--extra-body`).
pub fn json_object(s: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(s) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(format!("`{s}` is not a JSON object")),
        Err(e) => Err(format!("`{s}` is not a JSON object: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_secrets_are_userinfo_and_credential_query_values() {
        assert_eq!(
            redacted_url("https://u:pw@h:1/v1?API_KEY=k1&model=m&Access-Token=t2#f"),
            "https://***@h:1/v1?API_KEY=***&model=m&Access-Token=***#f"
        );
        assert_eq!(
            redacted_url("http://h/v1?key=abc;token=x&monkey=1"),
            "http://h/v1?key=***;token=***&monkey=1"
        );
        assert_eq!(redacted_url("http://h:1/a@b?x=1"), "http://h:1/a@b?x=1");
        assert!(url_secrets("not a url?key=1").is_empty());
    }

    const NOT_FINITE: [&str; 6] = ["nan", "NaN", "inf", "-inf", "infinity", "1e400"];

    #[test]
    fn numbers_are_finite_and_trimmed() {
        assert_eq!(number(" -2.5 "), Ok(-2.5));
        assert_eq!(number("0"), Ok(0.0));
        for bad in NOT_FINITE.iter().chain(&["", " ", "x", "1,2"]) {
            assert_eq!(number(bad), Err(format!("`{bad}` is not a number")));
        }
    }

    #[test]
    fn positive_and_non_negative_bounds() {
        assert_eq!(positive("1e-9"), Ok(1e-9));
        assert_eq!(non_negative("0"), Ok(0.0));
        assert_eq!(non_negative("-0"), Ok(-0.0));
        for bad in NOT_FINITE.iter().chain(&["", "0", "-1", "x"]) {
            assert_eq!(
                positive(bad),
                Err(format!("`{bad}` is not a positive number"))
            );
        }
        for bad in NOT_FINITE.iter().chain(&["", "-1e-9", "x"]) {
            assert_eq!(
                non_negative(bad),
                Err(format!("`{bad}` is not a non-negative number"))
            );
        }
    }

    #[test]
    fn fractions_and_shares() {
        assert_eq!(fraction("0"), Ok(0.0));
        assert_eq!(fraction("1"), Ok(1.0));
        for bad in NOT_FINITE.iter().chain(&["", "-0.1", "1.01"]) {
            assert_eq!(
                fraction(bad),
                Err(format!("`{bad}` is not between 0 and 1"))
            );
        }
        assert_eq!(share("1"), Ok(1.0));
        assert_eq!(share("0.25"), Ok(0.25));
        for bad in NOT_FINITE.iter().chain(&["", "0", "1.5"]) {
            assert_eq!(
                share(bad),
                Err(format!("`{bad}` is not more than 0 and at most 1"))
            );
        }
    }

    #[test]
    fn percentage_points_are_0_to_100() {
        assert_eq!(percentage_points("0"), Ok(0.0));
        assert_eq!(percentage_points("100"), Ok(100.0));
        for bad in NOT_FINITE.iter().chain(&["", "-1", "100.5"]) {
            assert_eq!(
                percentage_points(bad),
                Err(format!(
                    "`{bad}` is not between 0 and 100 percentage points"
                ))
            );
        }
    }

    #[test]
    fn rates_end() {
        assert_eq!(rate("2.5"), Ok(2.5));
        assert_eq!(rate("1e-6"), Ok(1e-6));
        assert_eq!(
            rate("1e-7"),
            Err("`1e-7` requests/s is below the limit of 1e-6".into())
        );
        assert_eq!(rate("0"), Err("`0` is not a positive number".into()));
        assert_eq!(rate("inf"), Err("`inf` is not a positive number".into()));
    }

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(positive_seconds("2.5"), Ok(2.5));
        assert_eq!(positive_seconds("1e6"), Ok(1e6));
        for bad in ["1e20", "1e300", "inf", "nan", "0", "-1", ""] {
            assert!(positive_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(
            positive_seconds("1e20"),
            Err("`1e20` seconds is more than the limit of 1000000 s (about 11.6 days)".into())
        );
        assert_eq!(non_negative_seconds("0"), Ok(0.0));
        assert_eq!(
            non_negative_seconds("-1"),
            Err("`-1` is not a non-negative number".into())
        );
        assert!(non_negative_seconds("1e300").unwrap_err().contains("limit"));
    }

    #[test]
    fn delays_are_at_most_a_year() {
        assert_eq!(delay_ms("500"), Ok(500.0));
        assert_eq!(delay_ms("0"), Ok(0.0));
        assert_eq!(delay_ms("31536000000"), Ok(MAX_DELAY_MS));
        assert_eq!(
            delay_ms("1e11"),
            Err("`1e11` ms is more than the limit of 31536000000 ms (a year)".into())
        );
        for bad in NOT_FINITE.iter().chain(&["", "-1"]) {
            assert_eq!(
                delay_ms(bad),
                Err(format!("`{bad}` is not a non-negative number"))
            );
        }
    }

    #[test]
    fn three_numbers_exactly() {
        assert_eq!(three_numbers("1, 2,-3e-2"), Ok([1.0, 2.0, -0.03]));
        for bad in ["", "1,2", "1,2,3,4", "1,x,3", "1,nan,3", "1,2,inf"] {
            assert_eq!(
                three_numbers(bad),
                Err(format!("`{bad}` is not three numbers A,B,C"))
            );
        }
    }

    #[test]
    fn urls_need_a_scheme_and_a_host() {
        assert!(url("http://127.0.0.1:8000").is_ok());
        assert!(url("HTTPS://h/v1").is_ok());
        let e = url("localhost:8123").unwrap_err();
        assert!(
            e.contains("no scheme") && e.contains("http://localhost:8123"),
            "{e}"
        );
        assert!(url("http://").unwrap_err().contains("no host"));
        assert!(url("http:///v1").unwrap_err().contains("no host"));
        assert!(url("").unwrap_err().contains("no scheme"));
    }

    #[test]
    fn headers() {
        assert_eq!(
            header("X-A: b c"),
            Ok(("X-A".to_string(), "b c".to_string()))
        );
        assert_eq!(header("X-A:"), Ok(("X-A".to_string(), String::new())));
        assert_eq!(
            header("nocolon"),
            Err("`nocolon` is not a header: expected NAME:VALUE".into())
        );
        for bad in [": v", "a b: v", "é: v", "x(y): v"] {
            assert!(
                header(bad).unwrap_err().contains("is not a header name"),
                "{bad}"
            );
        }
        for bad in ["X: a\u{1}b", "X: é", "X: a\u{7f}"] {
            assert_eq!(
                header(bad),
                Err("the value of `X` must be printable ASCII".into()),
                "{bad}"
            );
        }
    }

    #[test]
    fn objects() {
        assert!(json_object("{\"a\":1}").is_ok());
        assert_eq!(json_object("[1]"), Err("`[1]` is not a JSON object".into()));
        assert!(json_object("")
            .unwrap_err()
            .starts_with("`` is not a JSON object: "));
        assert!(json_object("{").is_err());
    }
}
