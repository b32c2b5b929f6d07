//! TLS for the real-server targets, with rustls (the ring provider, TLS 1.2
//! and 1.3, the crates ureq already brings): the trusted roots (the Mozilla
//! store, or `--cacert`'s certificates) for both clients, the words a TLS
//! failure is reported in (one wording, whichever client met it), and the
//! event-driven client's [`Session`]: a `rustls::ClientConnection` driven
//! over a non-blocking socket, with no reads of its own.
//!
//! Why the session never reads the socket: the event loop reads it (through
//! [`crate::rxtime`], so every read has the kernel's arrival stamp) and
//! hands the ciphertext to [`Session::receive`], which hands back the
//! plaintext those bytes completed. A token's time is then the arrival
//! of the TCP read that carried the last of its record, exactly as a
//! plaintext token's is the read that carried it; decryption adds CPU,
//! never time.

use std::fmt;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, ClientConnection, RootCertStore};

/// `--cacert`: the CA certificates a server's certificate must chain to,
/// read and checked when the run is planned (before anything is sent).
/// They replace the built-in Mozilla roots, as curl's `--cacert` replaces
/// its bundle: ureq, the blocking client, can only be given a whole set of
/// roots, and both clients must trust the same servers.
#[derive(Debug, Clone)]
pub struct CaCerts {
    path: PathBuf,
    certs: Arc<[CertificateDer<'static>]>,
}

/// What the fix for a bad `--cacert` file is, in every message about one.
const CACERT_FIX: &str = "give a PEM file with the certificate(s) of the CA that signed the \
                          server's certificate (`-----BEGIN CERTIFICATE-----` blocks; a DER \
                          file converts with `openssl x509 -inform der -in ca.der -out ca.pem`)";

/// A `--cacert` file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("--cacert {}: cannot read it ({source}); {CACERT_FIX}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--cacert {}: no certificate in it; {CACERT_FIX}", path.display())]
    NoCertificate { path: PathBuf },
    #[error("--cacert {}: bad PEM ({reason}); {CACERT_FIX}", path.display())]
    Pem { path: PathBuf, reason: String },
    #[error("--cacert {}: certificate {index} cannot be trusted as a CA ({reason}); {CACERT_FIX}", path.display())]
    Unusable {
        path: PathBuf,
        /// 1-based, in the file's order.
        index: usize,
        reason: String,
    },
}

impl CaCerts {
    /// Reads `path`: one or more PEM certificates, each usable as a root.
    pub fn load(path: &Path) -> Result<CaCerts, CaError> {
        let bytes = std::fs::read(path).map_err(|source| CaError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        CaCerts::from_pem(path, &bytes)
    }

    /// The certificates in `pem` (other PEM blocks, such as a key, are
    /// skipped); `path` names the file in errors.
    pub fn from_pem(path: &Path, pem: &[u8]) -> Result<CaCerts, CaError> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CaError::Pem {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?;
        if certs.is_empty() {
            return Err(CaError::NoCertificate {
                path: path.to_path_buf(),
            });
        }
        // The same check the clients make when they start: a certificate
        // webpki cannot take as a trust anchor fails now, not mid-run.
        let mut store = RootCertStore::empty();
        for (i, c) in certs.iter().enumerate() {
            store.add(c.clone()).map_err(|e| CaError::Unusable {
                path: path.to_path_buf(),
                index: i + 1,
                reason: e.to_string(),
            })?;
        }
        Ok(CaCerts {
            path: path.to_path_buf(),
            certs: certs.into(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn certs(&self) -> &[CertificateDer<'static>] {
        &self.certs
    }

    /// The same roots for ureq.
    fn ureq_config(&self) -> ureq::tls::TlsConfig {
        let certs: Vec<ureq::tls::Certificate<'static>> = self
            .certs
            .iter()
            .map(|c| ureq::tls::Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .build()
    }
}

/// A ureq agent's settings with `--cacert`'s roots instead of ureq's
/// built-in ones (the blocking client, the model listing, the metrics
/// scrape).
pub fn with_roots(
    config: ureq::config::ConfigBuilder<ureq::typestate::AgentScope>,
    cacert: Option<&CaCerts>,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    match cacert {
        Some(ca) => config.tls_config(ca.ureq_config()),
        None => config,
    }
}

/// Where the evented client's TLS connections go: the client's settings
/// (made once per run: its session cache lets later connections resume
/// instead of doing a whole handshake) and the name the server's
/// certificate must carry.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<ClientConfig>,
    pub name: ServerName<'static>,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("name", &self.name).finish()
    }
}

/// The evented client's TLS settings could not be made.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("`{host}` cannot be a TLS server name: {reason}")]
    Name { host: String, reason: String },
    #[error("cannot set up TLS: {0}")]
    Config(#[from] rustls::Error),
}

impl Tls {
    /// For a server at `host` (a DNS name, or an IP address, which the
    /// certificate must then list as such).
    pub fn new(host: &str, cacert: Option<&CaCerts>) -> Result<Tls, SetupError> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| SetupError::Name {
            host: host.to_string(),
            reason: e.to_string(),
        })?;
        Ok(Tls {
            config: client_config(cacert)?,
            name,
        })
    }
}

/// rustls' client settings: ureq's (the ring provider, TLS 1.2 and 1.3,
/// the Mozilla roots unless `--cacert`), so both clients accept the same
/// servers.
pub fn client_config(cacert: Option<&CaCerts>) -> Result<Arc<ClientConfig>, rustls::Error> {
    let roots = match cacert {
        Some(ca) => {
            let mut store = RootCertStore::empty();
            for c in ca.certs() {
                store.add(c.clone())?;
            }
            store
        }
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// A TLS failure in words, with what to do about it where that is
/// known; `handshake`: the connection never carried a request.
pub fn describe(e: &rustls::Error, handshake: bool) -> String {
    use CertificateError as C;
    let hint = match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer | C::BadSignature => Some(
                "the server's certificate is not signed by a CA this client trusts: \
                 give --cacert FILE with that CA's certificate in PEM",
            ),
            C::NotValidForName | C::NotValidForNameContext { .. } => Some(
                "the certificate does not name the host in --url: use a host name (or \
                 address) the certificate lists",
            ),
            C::Expired
            | C::ExpiredContext { .. }
            | C::NotValidYet
            | C::NotValidYetContext { .. } => Some(
                "the certificate is outside its validity dates: renew it, or check the \
                 server's and this machine's clocks",
            ),
            // webpki's error reaches rustls' API only as an opaque one;
            // its name is the one sign (no hint if it changes).
            C::Other(o) if o.0.to_string().contains("CaUsedAsEndEntity") => Some(
                "the server's certificate is marked as a CA, as `openssl req -x509` makes \
                 one by default: serve a certificate a CA signed, or make the self-signed \
                 one with `-addext basicConstraints=critical,CA:FALSE`",
            ),
            _ => None,
        },
        // What a plaintext server's answer to a ClientHello looks like.
        rustls::Error::InvalidMessage(_) | rustls::Error::InappropriateMessage { .. }
            if handshake =>
        {
            Some("the server does not seem to speak TLS: is its URL http://?")
        }
        _ => None,
    };
    let what = if handshake {
        "TLS handshake failed"
    } else {
        "TLS error"
    };
    match hint {
        Some(h) => format!("{what}: {e} ({h})"),
        None => format!("{what}: {e}"),
    }
}

/// The rustls error inside an I/O error (how ureq, and rustls' own
/// streams, pass it on).
pub fn rustls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// How far the server's side of a TLS stream is, once its plaintext has
/// been handed on.
#[derive(Debug, PartialEq, Eq)]
pub enum Received<T> {
    /// The plaintext's reader stopped with this (its exchange ended).
    Stopped(T),
    /// More may come.
    Open,
    /// The server's `close_notify`: its side ended cleanly.
    Closed,
    /// The TCP connection ended without a `close_notify`.
    Truncated,
}

/// One TLS connection of the event-driven client. It does no I/O of its
/// own except writing ciphertext to the socket it is given; every byte
/// read from the socket comes in through [`Session::receive`].
pub struct Session {
    conn: ClientConnection,
    /// Something came after the exchange's end (plaintext, a close, a
    /// protocol error): the connection is not trusted with another request.
    spoiled: bool,
}

impl Session {
    pub fn new(tls: &Tls) -> Result<Session, rustls::Error> {
        Ok(Session {
            conn: ClientConnection::new(tls.config.clone(), tls.name.clone())?,
            spoiled: false,
        })
    }

    /// Still handshaking, or holding ciphertext for the socket: the event
    /// loop must not pause its polls for this connection.
    pub fn busy(&self) -> bool {
        self.conn.is_handshaking() || self.conn.wants_write()
    }

    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The connection may carry another request: its exchange ended with
    /// nothing after it.
    pub fn reusable(&mut self) -> bool {
        !self.spoiled
            && matches!(self.conn.reader().fill_buf(), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }

    /// Takes as much of `plain` as the session will (before the handshake
    /// ends it holds up to 64 KiB and sends it after) and writes the
    /// ciphertext to `sock` until it would block: how many bytes of
    /// `plain` were taken. Call again when the socket is writable, or
    /// after [`Session::receive`] (which may have finished the handshake
    /// or have an answer to send).
    pub fn send(&mut self, plain: &[u8], sock: &mut dyn Write) -> io::Result<usize> {
        let mut taken = 0;
        loop {
            while self.conn.wants_write() {
                match self.conn.write_tls(sock) {
                    // The socket took nothing: wait for it to be writable.
                    Ok(0) => return Ok(taken),
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(taken),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            if taken == plain.len() {
                return Ok(taken);
            }
            match self.conn.writer().write(&plain[taken..])? {
                // The handshake's buffer is full: the rest follows it.
                0 => return Ok(taken),
                n => taken += n,
            }
        }
    }

    /// Ciphertext read from the socket: each piece of plaintext it
    /// completes goes to `plain` until `plain` returns `Some` (its
    /// exchange ended). The rest of the ciphertext is still taken in, so
    /// the session stays in step with the server; plaintext after the
    /// stop stays unread and makes the connection not [`reusable`].
    ///
    /// An error is the server's (a certificate this client does not
    /// trust, a fatal alert, a record that does not decrypt); the
    /// plaintext that came before it has been handed on.
    ///
    /// [`reusable`]: Session::reusable
    pub fn receive<T>(
        &mut self,
        mut cipher: &[u8],
        plain: &mut dyn FnMut(&[u8]) -> Option<T>,
    ) -> Result<Received<T>, rustls::Error> {
        let mut stopped = None;
        while !cipher.is_empty() {
            match self.conn.read_tls(&mut cipher) {
                Ok(n) if n > 0 => {}
                // After a close_notify rustls reads nothing more, and
                // after a stop its plaintext buffer may be full: either
                // way the rest is not this exchange's.
                _ => {
                    self.spoiled = true;
                    break;
                }
            }
            let processed = self.conn.process_new_packets();
            if stopped.is_none() {
                match self.drain(plain) {
                    Received::Stopped(t) => stopped = Some(t),
                    Received::Open => {}
                    end => return processed.map(|_| end),
                }
            }
            if let Err(e) = processed {
                if stopped.is_some() {
                    self.spoiled = true;
                    break;
                }
                return Err(e);
            }
        }
        Ok(match stopped {
            Some(t) => Received::Stopped(t),
            None => Received::Open,
        })
    }

    /// The socket's EOF: the plaintext still buffered goes to `plain`,
    /// then whether the server had said `close_notify` first.
    pub fn eof<T>(
        &mut self,
        plain: &mut dyn FnMut(&[u8]) -> Option<T>,
    ) -> Result<Received<T>, rustls::Error> {
        // An empty read is how rustls learns of the EOF.
        let _ = self.conn.read_tls(&mut &[][..]);
        let processed = self.conn.process_new_packets();
        let end = self.drain(plain);
        processed?;
        Ok(match end {
            // rustls says an EOF with nothing to read is one of these.
            Received::Open => Received::Truncated,
            end => end,
        })
    }

    /// Hands the decrypted plaintext to `plain`; `Open` when it is all
    /// read and more may come.
    fn drain<T>(&mut self, plain: &mut dyn FnMut(&[u8]) -> Option<T>) -> Received<T> {
        loop {
            let mut reader = self.conn.reader();
            match reader.fill_buf() {
                Ok([]) => return Received::Closed,
                Ok(chunk) => {
                    let n = chunk.len();
                    let stop = plain(chunk);
                    reader.consume(n);
                    if let Some(t) = stop {
                        return Received::Stopped(t);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Received::Open,
                // UnexpectedEof: the TCP EOF came without a close_notify.
                Err(_) => return Received::Truncated,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use rustls::{ServerConfig, ServerConnection};

    use super::*;

    /// A CA (PEM) and a server certificate (DER) and key it signed for
    /// `server.test`.
    fn test_pki() -> (String, CertificateDer<'static>, Vec<u8>) {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["server.test".to_string()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap();
        (ca_pem, leaf.der().clone(), key.serialize_der())
    }

    /// A client session for `name` (trusting the test CA, or only the
    /// Mozilla roots) and the server it talks to, in memory.
    fn pair(name: &str, trust_the_ca: bool) -> (Session, ServerConnection) {
        let (ca_pem, cert, key) = test_pki();
        let ca = CaCerts::from_pem(Path::new("ca.pem"), ca_pem.as_bytes()).unwrap();
        let tls = Tls::new(name, trust_the_ca.then_some(&ca)).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(key.into());
        let server =
            ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(vec![cert], key)
                .unwrap();
        let server = ServerConnection::new(Arc::new(server)).unwrap();
        (Session::new(&tls).unwrap(), server)
    }

    /// What the server would put on the wire now.
    fn server_flight(s: &mut ServerConnection) -> Vec<u8> {
        let mut wire = Vec::new();
        while s.wants_write() {
            s.write_tls(&mut wire).unwrap();
        }
        wire
    }

    /// The client's ciphertext (with `plain` in it) read by the server;
    /// how much of `plain` the session took.
    fn to_server(c: &mut Session, s: &mut ServerConnection, plain: &[u8]) -> usize {
        let mut wire = Vec::new();
        let taken = c.send(plain, &mut wire).unwrap();
        let mut rd = &wire[..];
        while !rd.is_empty() {
            s.read_tls(&mut rd).unwrap();
            s.process_new_packets().unwrap();
        }
        taken
    }

    /// Everything `receive` hands on, with the ciphertext cut in `step`-byte pieces.
    fn receive_all(c: &mut Session, wire: &[u8], step: usize) -> Vec<u8> {
        let mut got = Vec::new();
        for piece in wire.chunks(step) {
            let r = c.receive(piece, &mut |p| {
                got.extend_from_slice(p);
                None::<()>
            });
            assert_eq!(r, Ok(Received::Open));
        }
        got
    }

    /// Handshake with the request held until it ends; the server has the
    /// request.
    fn handshake(c: &mut Session, s: &mut ServerConnection) {
        // Before the handshake the session holds the request.
        assert_eq!(to_server(c, s, b"GET / HTTP/1.1\r\n\r\n"), 18);
        assert!(c.busy());
        let flight = server_flight(s);
        assert!(receive_all(c, &flight, flight.len()).is_empty());
        to_server(c, s, b"");
        assert!(!c.is_handshaking());
        let mut req = vec![0; 18];
        s.reader().read_exact(&mut req).unwrap();
        assert_eq!(req, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[test]
    fn plaintext_arrives_whatever_the_pieces() {
        for step in [1, 7, 100, 1 << 20] {
            let (mut c, mut s) = pair("server.test", true);
            handshake(&mut c, &mut s);
            // Tickets first (TLS 1.3), then the answer, over several records.
            s.writer().write_all(b"HTTP/1.1 200 OK\r\n").unwrap();
            s.writer().write_all(&[b'x'; 40_000]).unwrap();
            let got = receive_all(&mut c, &server_flight(&mut s), step);
            assert_eq!(got.len(), 17 + 40_000, "step {step}");
            assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
            assert!(c.reusable());
        }
    }

    #[test]
    fn a_stop_with_plaintext_after_it_spoils_the_connection() {
        let (mut c, mut s) = pair("server.test", true);
        handshake(&mut c, &mut s);
        s.writer().write_all(b"the answer").unwrap();
        s.writer().write_all(b"and more").unwrap();
        let wire = server_flight(&mut s);
        let mut seen = 0;
        let r = c.receive(&wire, &mut |p| {
            seen += 1;
            (p == b"the answer").then_some("ended")
        });
        assert_eq!((r, seen), (Ok(Received::Stopped("ended")), 1));
        assert!(!c.reusable(), "bytes nobody asked for follow the answer");

        // Stopped at the last byte: the connection can be reused, and
        // the session still follows the server.
        let (mut c, mut s) = pair("server.test", true);
        handshake(&mut c, &mut s);
        s.writer().write_all(b"the answer").unwrap();
        let r = c.receive(&server_flight(&mut s), &mut |_| Some(()));
        assert_eq!(r, Ok(Received::Stopped(())));
        assert!(c.reusable());
        to_server(&mut c, &mut s, b"next");
        s.writer().write_all(b"next answer").unwrap();
        assert_eq!(
            receive_all(&mut c, &server_flight(&mut s), 5),
            b"next answer"
        );
    }

    #[test]
    fn close_notify_is_a_close_and_a_bare_eof_a_truncation() {
        let (mut c, mut s) = pair("server.test", true);
        handshake(&mut c, &mut s);
        s.writer().write_all(b"last words").unwrap();
        s.send_close_notify();
        let mut got = Vec::new();
        let r = c.receive(&server_flight(&mut s), &mut |p| {
            got.extend_from_slice(p);
            None::<()>
        });
        assert_eq!(
            (r, got.as_slice()),
            (Ok(Received::Closed), &b"last words"[..])
        );
        assert!(!c.reusable());

        let (mut c, mut s) = pair("server.test", true);
        handshake(&mut c, &mut s);
        s.writer().write_all(b"cut").unwrap();
        assert_eq!(receive_all(&mut c, &server_flight(&mut s), 2), b"cut");
        assert_eq!(c.eof(&mut |_| None::<()>), Ok(Received::Truncated));
    }

    #[test]
    fn certificate_failures_name_the_cause_and_the_fix() {
        // The Mozilla roots do not know the test CA.
        let (mut c, mut s) = pair("server.test", false);
        to_server(&mut c, &mut s, b"request");
        let e = c
            .receive(&server_flight(&mut s), &mut |_| None::<()>)
            .unwrap_err();
        assert!(c.is_handshaking());
        assert_eq!(
            describe(&e, true),
            "TLS handshake failed: invalid peer certificate: UnknownIssuer (the server's \
             certificate is not signed by a CA this client trusts: give --cacert FILE with \
             that CA's certificate in PEM)"
        );
        // The alert for the server is ready to go.
        let mut alert = Vec::new();
        c.send(&[], &mut alert).unwrap();
        assert!(!alert.is_empty());

        let (mut c, mut s) = pair("127.0.0.1", true);
        to_server(&mut c, &mut s, b"request");
        let e = c
            .receive(&server_flight(&mut s), &mut |_| None::<()>)
            .unwrap_err();
        let msg = describe(&e, true);
        assert!(
            msg.contains("not valid for name \"127.0.0.1\"")
                && msg.contains("does not name the host"),
            "{msg}"
        );
    }

    /// A self-signed server certificate given as --cacert works unless it
    /// is marked as a CA (what `openssl req -x509` makes by default).
    #[test]
    fn a_self_signed_ca_certificate_as_the_servers_own_is_named() {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
        for is_ca in [false, true] {
            let mut p = CertificateParams::new(vec!["server.test".to_string()]).unwrap();
            if is_ca {
                p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            }
            let key = KeyPair::generate().unwrap();
            let cert = p.self_signed(&key).unwrap();
            let ca = CaCerts::from_pem(Path::new("self.pem"), cert.pem().as_bytes()).unwrap();
            let tls = Tls::new("server.test", Some(&ca)).unwrap();
            let server = ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
            let mut s = ServerConnection::new(Arc::new(server)).unwrap();
            let mut c = Session::new(&tls).unwrap();
            to_server(&mut c, &mut s, b"request");
            let got = c.receive(&server_flight(&mut s), &mut |_| None::<()>);
            match (is_ca, got) {
                (false, Ok(Received::Open)) => {}
                (true, Err(e)) => {
                    let msg = describe(&e, true);
                    assert!(msg.contains("basicConstraints=critical,CA:FALSE"), "{msg}");
                }
                (_, got) => panic!("CA {is_ca}: {got:?}"),
            }
        }
    }

    #[test]
    fn cacert_files_are_checked_before_use() {
        let p = Path::new("ca.pem");
        let (ca_pem, _, _) = test_pki();
        let ca = CaCerts::from_pem(p, format!("# a comment\n{ca_pem}{ca_pem}").as_bytes()).unwrap();
        assert_eq!(ca.certs().len(), 2);
        assert!(matches!(
            CaCerts::from_pem(p, b"no PEM here"),
            Err(CaError::NoCertificate { .. })
        ));
        let not_a_ca = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let e = CaCerts::from_pem(p, not_a_ca.as_bytes()).unwrap_err();
        assert!(matches!(e, CaError::Unusable { index: 1, .. }), "{e}");
        assert!(e
            .to_string()
            .starts_with("--cacert ca.pem: certificate 1 cannot be trusted"));
        let broken = "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        assert!(matches!(
            CaCerts::from_pem(p, broken.as_bytes()),
            Err(CaError::Pem { .. })
        ));
        let e = CaCerts::load(Path::new("/no/such/ca.pem")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("--cacert /no/such/ca.pem: cannot read it"),
            "{e}"
        );
    }
}
