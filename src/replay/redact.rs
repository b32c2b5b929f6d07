//! Secrets never leave mc-replay: the API key, the credentials of a URL
//! (`http://user:password@host`, also as the Basic-auth header a server may
//! echo), a credential in the URL's query (`?api_key=…`, `key`, `token`,
//! … as `options::url_secrets` names them), and the values of `--header`s
//! that carry credentials are replaced
//! by `***` in everything mc-replay writes: stderr, result lines (a server's
//! error body that quotes the request's `Authorization`), the summary,
//! `--metrics-out`.

use crate::error::Error;

/// What to hide, and the one way it is hidden.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

/// Header names whose values are credentials.
pub const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
];

const HIDDEN: &str = "***";

impl Redactor {
    /// The secrets of these options: `api_key`, the userinfo of each URL,
    /// and credential-carrying headers.
    pub fn new<'a>(
        api_key: Option<&str>,
        urls: impl IntoIterator<Item = &'a str>,
        headers: &[(String, String)],
    ) -> Redactor {
        let mut secrets = Vec::new();
        if let Some(k) = api_key.filter(|k| !k.is_empty()) {
            secrets.push(k.to_string());
        }
        for url in urls {
            // Query credentials (`?api_key=…`) are hidden as they are.
            for part in crate::options::url_secrets(url) {
                secrets.push(part.to_string());
            }
            let Some(userinfo) = userinfo(url) else {
                continue;
            };
            secrets.push(base64(userinfo.as_bytes()));
            if let Some((_, password)) = userinfo.split_once(':') {
                if !password.is_empty() {
                    secrets.push(password.to_string());
                }
            }
        }
        for (k, v) in headers {
            if SECRET_HEADERS.contains(&k.to_ascii_lowercase().as_str()) && !v.is_empty() {
                // `Bearer KEY`: the key alone too, as servers echo it alone.
                if let Some((_, token)) = v.split_once(' ') {
                    secrets.push(token.trim().to_string());
                }
                secrets.push(v.clone());
            }
        }
        // Longest first, so a secret inside another is not half-hidden.
        secrets.retain(|s| s.len() >= 3);
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// `text` with every secret replaced by `***`.
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), HIDDEN);
            }
        }
        out
    }

    fn touches(&self, text: &str) -> bool {
        self.secrets.iter().any(|s| text.contains(s.as_str()))
    }

    /// An error whose message holds a secret, as the same kind of error
    /// (so its exit code holds) with the secret hidden.
    pub fn error(&self, e: Error) -> Error {
        let text = format!("{e:#}");
        if !self.touches(&text) {
            return e;
        }
        let text = self.redact(&text);
        match e {
            Error::Unavailable(_) => Error::Unavailable(anyhow::anyhow!(text)),
            Error::Data { .. } | Error::Input(_) => Error::Input(text),
            Error::Usage(_) => Error::Usage(text),
            Error::TempFail(_) => Error::TempFail(text),
            Error::Exists { .. } | Error::CantCreate(_) => Error::CantCreate(text),
            Error::NoInput { path, source } => Error::NoInput {
                path,
                source: std::io::Error::new(source.kind(), self.redact(&source.to_string())),
            },
            Error::Output { path, source } => Error::Output {
                path,
                source: std::io::Error::new(source.kind(), self.redact(&source.to_string())),
            },
            Error::Io(source) => Error::Io(std::io::Error::new(
                source.kind(),
                self.redact(&source.to_string()),
            )),
            Error::Tokenizer(_) | Error::Other(_) => Error::Other(anyhow::anyhow!(text)),
        }
    }
}

/// The `user:password` of `scheme://user:password@host/…`.
fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (info, _) = authority.rsplit_once('@')?;
    (!info.is_empty()).then_some(info)
}

/// Standard base64 with padding (what `Authorization: Basic` carries).
pub fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_as_rfc_4648() {
        // RFC 4648 §10's test vectors.
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn every_form_of_every_secret_is_hidden() {
        let r = Redactor::new(
            Some("sk-KEY123"),
            ["http://alice:pw0rd@h:1/v1", "http://h:2"],
            &[
                ("Authorization".into(), "Bearer tok-999".into()),
                ("x-trace".into(), "visible".into()),
            ],
        );
        let text = "key sk-KEY123 url http://alice:pw0rd@h:1/v1 basic YWxpY2U6cHcwcmQ= \
                    bearer tok-999 pass pw0rd header visible";
        let out = r.redact(text);
        for s in [
            "sk-KEY123",
            "pw0rd",
            "alice:",
            "YWxpY2U6cHcwcmQ=",
            "tok-999",
        ] {
            assert!(!out.contains(s), "{s} in {out}");
        }
        assert!(
            out.contains("http://***@h:1/v1") && out.contains("visible"),
            "{out}"
        );
    }

    #[test]
    fn a_key_in_the_urls_query_is_hidden() {
        let r = Redactor::new(None, ["http://h:1/v1?Api_Key=qk-777&model=m"], &[]);
        let out = r.redact("GET http://h:1/v1?Api_Key=qk-777&model=m failed: qk-777");
        assert!(!out.contains("qk-777") && out.contains("model=m"), "{out}");
    }

    #[test]
    fn urls_without_credentials_change_nothing() {
        let r = Redactor::new(None, ["http://h:1/v1"], &[]);
        assert_eq!(r.redact("http://h:1/v1"), "http://h:1/v1");
        assert_eq!(userinfo("http://h:1/a@b"), None);
    }
}
