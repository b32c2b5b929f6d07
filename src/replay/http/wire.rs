//! HTTP/1.1 on the wire for the event-driven client, with no I/O: the
//! request written by hand, the response head parsed by `httparse`, and the
//! body's framing (chunked, `Content-Length`, or until the connection
//! closes) undone as bytes arrive, in whatever pieces the socket gives.
//! Pure, so every framing rule is unit-tested here.

use std::fmt;

use crate::replay::redact::base64;

/// The largest response head accepted: a server that sends more is broken
/// (real ones send a few hundred bytes).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most headers a response head may carry.
const MAX_HEADERS: usize = 64;

/// Where requests go: what the request line, `host` and the credentials
/// need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` as `--url` gave it, without its `user:password@` (the
    /// `host` header: a server logs it).
    pub authority: String,
    /// The URL's `user:password@`, sent as `authorization: Basic …` (as
    /// the blocking client, ureq, sends it) unless a header of the run
    /// carries its own `authorization`.
    pub basic: Option<Basic>,
    /// The name (or address) to resolve, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// Path and query, from `/`.
    pub path: String,
    pub tls: bool,
}

/// The `authorization` value of a URL's credentials; its `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct Basic(String);

impl Basic {
    pub fn header_value(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Basic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Basic ***")
    }
}

impl Endpoint {
    /// Reads an `http://` or `https://` URL; `None` for anything else.
    pub fn parse(url: &str) -> Option<Endpoint> {
        let uri: http::Uri = url.parse().ok()?;
        let tls = match uri.scheme_str()? {
            "http" => false,
            "https" => true,
            _ => return None,
        };
        let auth = uri.authority()?;
        let host = auth.host().trim_start_matches('[').trim_end_matches(']');
        let port = auth.port_u16().unwrap_or(if tls { 443 } else { 80 });
        // As ureq reads them: `user` alone is `user:`, nothing is decoded.
        let (userinfo, authority) = match auth.as_str().rsplit_once('@') {
            Some((info, rest)) => (Some(info), rest),
            None => (None, auth.as_str()),
        };
        let basic = userinfo.map(|info| {
            let creds = if info.contains(':') {
                info.to_string()
            } else {
                format!("{info}:")
            };
            Basic(format!("Basic {}", base64(creds.as_bytes())))
        });
        Some(Endpoint {
            authority: authority.to_string(),
            basic,
            host: host.to_string(),
            port,
            path: uri
                .path_and_query()
                .map_or("/".to_string(), |p| p.as_str().to_string()),
            tls,
        })
    }
}

/// Writes a POST of a JSON `body` with `headers` (already checked to be
/// valid HTTP when the options were parsed) to `out`, head and body in one
/// buffer so a small request leaves in one write.
pub fn write_request(
    out: &mut Vec<u8>,
    ep: &Endpoint,
    user_agent: &str,
    headers: &[(String, String)],
    body: &[u8],
) {
    use std::io::Write;
    out.clear();
    out.reserve(256 + body.len());
    // Writes into a Vec cannot fail.
    let _ = write!(
        out,
        "POST {} HTTP/1.1\r\nhost: {}\r\nuser-agent: {user_agent}\r\naccept: */*\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n",
        ep.path,
        ep.authority,
        body.len()
    );
    for (k, v) in headers {
        let _ = write!(out, "{k}: {v}\r\n");
    }
    if let Some(b) = &ep.basic {
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
        {
            let _ = write!(out, "authorization: {}\r\n", b.header_value());
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// A response head that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadError {
    /// Not HTTP, as `httparse` says.
    Parse(String),
    TooLarge,
    /// `Content-Length` not digits, or copies that disagree.
    BadLength,
    /// A `Transfer-Encoding` other than chunked (no compression is asked for).
    Encoding(String),
}

impl fmt::Display for HeadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadError::Parse(e) => write!(f, "bad response head: {e}"),
            HeadError::TooLarge => write!(f, "response head over {MAX_HEAD_BYTES} bytes"),
            HeadError::BadLength => write!(f, "bad content-length in the response"),
            HeadError::Encoding(e) => write!(f, "unsupported transfer-encoding `{e}`"),
        }
    }
}

/// What a response head says.
#[derive(Debug)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub retry_after: Option<String>,
    /// The connection may carry another request after this body.
    pub keep_alive: bool,
    pub body: Body,
}

impl Head {
    pub fn is_sse(&self) -> bool {
        self.content_type
            .as_deref()
            .is_some_and(|v| v.contains("text/event-stream"))
    }
}

/// One head read from the start of a buffer.
#[derive(Debug)]
pub enum Parsed {
    /// Not whole yet.
    Partial,
    /// An interim `1xx` answer (not 101) of this many bytes: skipped, but
    /// its bytes count toward the head limit.
    Interim(usize),
    /// The final head and how many bytes it took.
    Final(Head, usize),
}

/// Reads one head from the start of `buf`, which may take at most `room`
/// bytes (what [`MAX_HEAD_BYTES`] leaves after the interim heads before it:
/// a server that sends `100 Continue` without end is cut off there, not
/// at the timeout).
pub fn parse_one(buf: &[u8], room: usize) -> Result<Parsed, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    let n = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > room => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Parse(e.to_string())),
    };
    if n > room {
        return Err(HeadError::TooLarge);
    }
    let status = resp.code.unwrap_or(0);
    if (100..200).contains(&status) && status != 101 {
        return Ok(Parsed::Interim(n));
    }
    Ok(Parsed::Final(read_head(&resp, status)?, n))
}

/// Reads a response head from the start of `buf`: `Ok(None)` until it is
/// whole, else the head and how many bytes it took. Interim `1xx` answers
/// are skipped (their bytes counted toward [`MAX_HEAD_BYTES`]).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, HeadError> {
    let mut at = 0;
    loop {
        match parse_one(&buf[at..], MAX_HEAD_BYTES - at)? {
            Parsed::Partial => return Ok(None),
            Parsed::Interim(n) => at += n,
            Parsed::Final(head, n) => return Ok(Some((head, at + n))),
        }
    }
}

fn read_head(resp: &httparse::Response<'_, '_>, status: u16) -> Result<Head, HeadError> {
    let http11 = resp.version == Some(1);
    let mut content_type = None;
    let mut retry_after = None;
    let mut length: Option<u64> = None;
    let mut chunked = false;
    let mut close = !http11;
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        let value = value.trim();
        if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("retry-after") {
            retry_after = Some(value.to_string());
        } else if h.name.eq_ignore_ascii_case("content-length") {
            // Digits only (no sign, no spaces inside); copies must agree.
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HeadError::BadLength);
            }
            let n: u64 = value.parse().map_err(|_| HeadError::BadLength)?;
            if length.is_some_and(|l| l != n) {
                return Err(HeadError::BadLength);
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            for coding in value.split(',').map(str::trim).filter(|c| !c.is_empty()) {
                if coding.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                } else if !coding.eq_ignore_ascii_case("identity") {
                    return Err(HeadError::Encoding(coding.to_string()));
                }
            }
        } else if h.name.eq_ignore_ascii_case("connection") {
            for t in value.split(',').map(str::trim) {
                if t.eq_ignore_ascii_case("close") {
                    close = true;
                } else if t.eq_ignore_ascii_case("keep-alive") && !http11 {
                    close = false;
                }
            }
        }
    }
    // RFC 9112 §6.3: chunked wins over a length; 204 and 304 have no body.
    let body = if status == 204 || status == 304 {
        Body::Length(0)
    } else if chunked {
        Body::Chunked(Chunked::default())
    } else if let Some(n) = length {
        Body::Length(n)
    } else {
        close = true;
        Body::UntilClose
    };
    Ok(Head {
        status,
        content_type,
        retry_after,
        keep_alive: !close,
        body,
    })
}

/// A body's framing, and how far it has been read.
#[derive(Debug)]
pub enum Body {
    Chunked(Chunked),
    /// Bytes still to come.
    Length(u64),
    /// HTTP/1.0 style: the body ends where the connection does.
    UntilClose,
}

/// The framing was broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramingError(pub String);

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Body {
    /// Takes bytes read from the socket; hands the body's own bytes to
    /// `data`. Returns how many input bytes the body took and whether it
    /// is now complete (bytes after its end are not its own).
    pub fn feed(
        &mut self,
        input: &[u8],
        data: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, bool), FramingError> {
        match self {
            Body::Length(left) => {
                let take = (*left).min(input.len() as u64) as usize;
                if take > 0 {
                    data(&input[..take]);
                }
                *left -= take as u64;
                Ok((take, *left == 0))
            }
            Body::UntilClose => {
                if !input.is_empty() {
                    data(input);
                }
                Ok((input.len(), false))
            }
            Body::Chunked(c) => c.feed(input, data),
        }
    }

    /// The connection closed (EOF): did the body end cleanly?
    pub fn at_eof(&self) -> Result<(), FramingError> {
        match self {
            Body::UntilClose => Ok(()),
            Body::Length(0) => Ok(()),
            Body::Length(n) => Err(FramingError(format!(
                "connection closed with {n} bytes of the body still due (content-length)"
            ))),
            Body::Chunked(c) if c.state == ChunkState::Done => Ok(()),
            Body::Chunked(_) => Err(FramingError(
                "connection closed before the chunked body's last chunk".into(),
            )),
        }
    }

    /// True when nothing more is due (a zero length, or a finished chunked body).
    pub fn is_complete(&self) -> bool {
        match self {
            Body::Length(n) => *n == 0,
            Body::UntilClose => false,
            Body::Chunked(c) => c.state == ChunkState::Done,
        }
    }
}

/// The chunked decoder's place in the grammar (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum ChunkState {
    /// Reading a size line: hex digits, then extensions to the CRLF.
    #[default]
    Size,
    /// In the extensions (or whitespace) after the size.
    Extension,
    /// Expecting the LF of the size line.
    SizeLf,
    Data,
    /// Expecting the CR LF after a chunk's data.
    DataCr,
    DataLf,
    /// After the last chunk: trailer lines until an empty one.
    TrailerStart,
    TrailerLine,
    TrailerLf,
    EndLf,
    Done,
}

/// Longest size line (with extensions) accepted.
const MAX_SIZE_LINE: usize = 4096;

#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    /// The size being read, then the data still due in this chunk.
    size: u64,
    digits: usize,
    line_len: usize,
}

impl Chunked {
    fn feed(
        &mut self,
        input: &[u8],
        data: &mut dyn FnMut(&[u8]),
    ) -> Result<(usize, bool), FramingError> {
        let bad = |what: &str| Err(FramingError(format!("bad chunked body: {what}")));
        let mut i = 0;
        while i < input.len() {
            if self.state == ChunkState::Data {
                let take = (self.size).min((input.len() - i) as u64) as usize;
                data(&input[i..i + take]);
                i += take;
                self.size -= take as u64;
                if self.size == 0 {
                    self.state = ChunkState::DataCr;
                }
                continue;
            }
            let b = input[i];
            i += 1;
            self.line_len += 1;
            if self.line_len > MAX_SIZE_LINE {
                return bad("a size or trailer line over 4096 bytes");
            }
            match self.state {
                ChunkState::Size => match (b as char).to_digit(16) {
                    Some(d) => {
                        if self.digits >= 15 {
                            return bad("a chunk size over 2^60");
                        }
                        self.size = self.size * 16 + u64::from(d);
                        self.digits += 1;
                    }
                    None if self.digits == 0 => return bad("a size line without a size"),
                    None => match b {
                        b'\r' => self.state = ChunkState::SizeLf,
                        b'\n' => self.end_size_line(),
                        b';' | b' ' | b'\t' => self.state = ChunkState::Extension,
                        _ => return bad("a chunk size that is not hex"),
                    },
                },
                ChunkState::Extension => match b {
                    b'\r' => self.state = ChunkState::SizeLf,
                    b'\n' => self.end_size_line(),
                    _ => {}
                },
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return bad("CR without LF after a chunk size");
                    }
                    self.end_size_line();
                }
                ChunkState::DataCr => match b {
                    b'\r' => self.state = ChunkState::DataLf,
                    // A lone LF is tolerated, as most clients do.
                    b'\n' => self.next_chunk(),
                    _ => return bad("a chunk longer than its size"),
                },
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return bad("CR without LF after a chunk");
                    }
                    self.next_chunk();
                }
                ChunkState::TrailerStart => match b {
                    b'\r' => self.state = ChunkState::EndLf,
                    b'\n' => {
                        self.state = ChunkState::Done;
                        return Ok((i, true));
                    }
                    _ => self.state = ChunkState::TrailerLine,
                },
                ChunkState::TrailerLine => {
                    if b == b'\n' {
                        self.state = ChunkState::TrailerStart;
                        self.line_len = 0;
                    } else if b == b'\r' {
                        self.state = ChunkState::TrailerLf;
                    }
                }
                ChunkState::TrailerLf => {
                    if b != b'\n' {
                        return bad("CR without LF in the trailer");
                    }
                    self.state = ChunkState::TrailerStart;
                    self.line_len = 0;
                }
                ChunkState::EndLf => {
                    if b != b'\n' {
                        return bad("CR without LF at the body's end");
                    }
                    self.state = ChunkState::Done;
                    return Ok((i, true));
                }
                ChunkState::Data => {}
                ChunkState::Done => return Ok((i - 1, true)),
            }
        }
        Ok((i, self.state == ChunkState::Done))
    }

    fn end_size_line(&mut self) {
        self.line_len = 0;
        self.digits = 0;
        self.state = if self.size == 0 {
            ChunkState::TrailerStart
        } else {
            ChunkState::Data
        };
    }

    fn next_chunk(&mut self) {
        self.state = ChunkState::Size;
        self.size = 0;
        self.line_len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> (Head, usize) {
        parse_head(s.as_bytes()).unwrap().unwrap()
    }

    /// Feeds `input` in pieces of `step` bytes; the data, the bytes taken
    /// and whether the body completed.
    fn decode(body: &mut Body, input: &[u8], step: usize) -> (Vec<u8>, usize, bool) {
        let mut out = Vec::new();
        let mut used = 0;
        for piece in input.chunks(step) {
            let (n, done) = body.feed(piece, &mut |d| out.extend_from_slice(d)).unwrap();
            used += n;
            if done {
                return (out, used, true);
            }
        }
        (out, used, false)
    }

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:8000/v1/chat/completions").unwrap();
        assert_eq!(e.authority, "127.0.0.1:8000");
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8000));
        assert_eq!(e.path, "/v1/chat/completions");
        let e = Endpoint::parse("https://[::1]/v1").unwrap();
        assert_eq!((e.host.as_str(), e.port, e.tls), ("::1", 443, true));
        assert!(Endpoint::parse("ftp://h/x").is_none());
    }

    #[test]
    fn url_credentials_go_in_authorization_not_in_host() {
        let e = Endpoint::parse("http://martin:secret@h:1/v1/completions").unwrap();
        assert_eq!(e.authority, "h:1");
        assert!(!format!("{e:?}").contains("secret"));
        let mut out = Vec::new();
        write_request(&mut out, &e, "ua/1", &[], b"{}");
        let text = String::from_utf8(out).unwrap();
        // ureq's own test sends the same value for the same URL.
        assert!(text.contains("\r\nhost: h:1\r\n"), "{text}");
        assert!(
            text.contains("\r\nauthorization: Basic bWFydGluOnNlY3JldA==\r\n"),
            "{text}"
        );
        assert!(
            !text.contains("martin") && !text.contains("secret"),
            "{text}"
        );
        // A user alone, and an `authorization` of the run's own, as ureq does.
        let e = Endpoint::parse("https://martin@[::1]/v1").unwrap();
        assert_eq!((e.authority.as_str(), e.host.as_str()), ("[::1]", "::1"));
        let mut out = Vec::new();
        write_request(&mut out, &e, "ua/1", &[], b"{}");
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("authorization: Basic bWFydGluOg==\r\n"));
        let mut out = Vec::new();
        let own = [("Authorization".to_string(), "Bearer k".to_string())];
        write_request(&mut out, &e, "ua/1", &own, b"{}");
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.contains("Basic") && text.contains("Bearer k"),
            "{text}"
        );
    }

    #[test]
    fn request_head_and_body() {
        let e = Endpoint::parse("http://h:1/v1/completions").unwrap();
        let mut out = Vec::new();
        write_request(&mut out, &e, "ua/1", &[("x-a".into(), "b".into())], b"{}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/completions HTTP/1.1\r\nhost: h:1\r\nuser-agent: ua/1\r\naccept: */*\r\n\
             content-type: application/json\r\ncontent-length: 2\r\nx-a: b\r\n\r\n{}"
        );
    }

    #[test]
    fn heads_and_their_framing() {
        let sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        let (h, n) = head(&format!("{sse}rest"));
        assert_eq!(n, sse.len());
        assert!(h.is_sse() && h.keep_alive);
        assert!(matches!(h.body, Body::Chunked(_)));
        let (h, _) = head("HTTP/1.1 429 Too Many\r\nretry-after: 3\r\ncontent-length: 5\r\n\r\n");
        assert_eq!((h.status, h.retry_after.as_deref()), (429, Some("3")));
        assert!(matches!(h.body, Body::Length(5)));
        let (h, _) = head("HTTP/1.0 200 OK\r\ncontent-type: text/event-stream\r\n\r\n");
        assert!(!h.keep_alive && matches!(h.body, Body::UntilClose));
        let (h, _) = head("HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
        assert!(!h.keep_alive);
        // An interim answer is skipped.
        let two = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        let (h, n) = head(two);
        assert_eq!((h.status, n), (204, two.len()));
        assert!(h.body.is_complete());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
            .unwrap()
            .is_none());
        for bad in [
            "HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
            "SSH-2.0-OpenSSH\r\n\r\n",
        ] {
            assert!(parse_head(bad.as_bytes()).is_err(), "{bad}");
        }
        // Interim heads count toward the limit: endless ones end in an error.
        let endless = "HTTP/1.1 100 Continue\r\n\r\n".repeat(MAX_HEAD_BYTES / 20);
        assert_eq!(
            parse_head(endless.as_bytes()).err(),
            Some(HeadError::TooLarge)
        );
        let huge = format!("HTTP/1.1 200 OK\r\nx: {}", "a".repeat(MAX_HEAD_BYTES + 1));
        assert_eq!(parse_head(huge.as_bytes()).err(), Some(HeadError::TooLarge));
    }

    #[test]
    fn chunked_bodies_in_any_pieces() {
        let wire = b"5\r\nhello\r\n1;ext=1\r\n \r\n0\r\nx-trailer: 1\r\n\r\nNEXT";
        for step in [1, 2, 3, 7, 100] {
            let mut b = Body::Chunked(Chunked::default());
            let (data, used, done) = decode(&mut b, wire, step);
            assert_eq!(data, b"hello ", "step {step}");
            assert!(done);
            assert_eq!(&wire[used..], b"NEXT", "step {step}");
            assert!(b.at_eof().is_ok());
        }
    }

    #[test]
    fn broken_chunked_bodies() {
        for wire in [&b"zz\r\nx"[..], b"2\r\nabc\r\n", b"\r\n", b"1\rx"] {
            let mut b = Body::Chunked(Chunked::default());
            assert!(b.feed(wire, &mut |_| {}).is_err(), "{wire:?}");
        }
        // Cut mid-chunk, and cut after [DONE] without the last chunk.
        let mut b = Body::Chunked(Chunked::default());
        let (_, _, done) = decode(&mut b, b"40\r\ndata: {\"ch", 100);
        assert!(!done && b.at_eof().is_err());
        let mut b = Body::Chunked(Chunked::default());
        let (_, _, done) = decode(&mut b, b"e\r\ndata: [DONE]\n\n\r\n", 100);
        assert!(!done && b.at_eof().is_err());
    }

    #[test]
    fn length_and_close_delimited_bodies() {
        let mut b = Body::Length(3);
        let (data, used, done) = decode(&mut b, b"abcdef", 2);
        assert_eq!((data.as_slice(), used, done), (&b"abc"[..], 3, true));
        let mut b = Body::Length(10);
        decode(&mut b, b"abc", 10);
        assert!(b.at_eof().is_err());
        let mut b = Body::UntilClose;
        let (data, _, done) = decode(&mut b, b"abc", 1);
        assert_eq!((data.as_slice(), done), (&b"abc"[..], false));
        assert!(b.at_eof().is_ok());
    }
}
