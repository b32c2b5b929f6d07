//! A GET that carries the run's credentials (`--api-key`, `--header`, a
//! URL's `user:password@`) and follows a redirect only within the same
//! origin: the model listing (`/v1/models`) and the `/metrics` scrape.
//!
//! ureq follows redirects itself and sends every header the request set
//! (`X-Api-Key`, a `--header` `Authorization`) to wherever the redirect
//! points. A redirect to another scheme, host or port is refused, with an
//! error naming it, rather than followed without the credentials: an
//! answer from a server the run never named is not the model list or the
//! metrics of the server under test, and a listing that then fails for
//! want of a key would hide why. A redirect within the origin (a
//! `/metrics` → `/metrics/` slash redirect) is followed with the headers,
//! as before. Completions do not follow redirects at all (a 3xx is
//! `http_3xx`).

use ureq::http::Response;
use ureq::Body;

/// Redirects followed within the origin before giving up.
pub const MAX_HOPS: usize = 5;

/// A GET that did not reach an answer.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Http(#[from] ureq::Error),
    #[error(
        "HTTP {status} redirect to another origin ({location}): not followed, so that the \
         API key and credential headers are not sent to another server; give the URL it \
         points to if that server is the one to ask"
    )]
    CrossOrigin { status: u16, location: String },
    #[error("HTTP {status} redirect without a usable location")]
    NoLocation { status: u16 },
    #[error("more than {MAX_HOPS} redirects")]
    TooMany,
}

/// GETs `url` with `headers` (the agent must not follow redirects:
/// `max_redirects(0)`); a 3xx to the same origin is followed, one to
/// another origin is refused. Any other answer is returned as it is.
pub fn get(
    agent: &ureq::Agent,
    url: &str,
    headers: &[(String, String)],
) -> Result<Response<Body>, FollowError> {
    let mut url = url.to_string();
    for _ in 0..=MAX_HOPS {
        let mut req = agent.get(&url);
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = req.call()?;
        let status = resp.status().as_u16();
        if !(300..400).contains(&status) || status == 304 {
            return Ok(resp);
        }
        let location = resp
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .ok_or(FollowError::NoLocation { status })?;
        url = same_origin(&url, location).ok_or_else(|| FollowError::CrossOrigin {
            status,
            location: location.to_string(),
        })?;
    }
    Err(FollowError::TooMany)
}

/// Where `location` points from `from`, when that is the same origin
/// (scheme, host, port): `from`'s scheme and authority (its credentials
/// too) with the location's path. `None` for another origin (or one that
/// cannot be read).
pub fn same_origin(from: &str, location: &str) -> Option<String> {
    let base: http::Uri = from.parse().ok()?;
    let scheme = base.scheme_str()?;
    let authority = base.authority()?;
    if location.starts_with('/') && !location.starts_with("//") {
        return Some(format!("{scheme}://{authority}{location}"));
    }
    // `//host/path`: another authority on the same scheme.
    let absolute;
    let location = match location.strip_prefix("//") {
        Some(_) => {
            absolute = format!("{scheme}:{location}");
            absolute.as_str()
        }
        None => location,
    };
    let to: http::Uri = location.parse().ok()?;
    let (Some(to_scheme), Some(to_auth)) = (to.scheme_str(), to.authority()) else {
        // A relative path: beside the last segment of `from`'s path.
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        return (!location.contains(':') && !location.is_empty())
            .then(|| format!("{scheme}://{authority}{dir}/{location}"));
    };
    let port = |s: &str, a: &http::uri::Authority| {
        a.port_u16().unwrap_or(if s.eq_ignore_ascii_case("https") {
            443
        } else {
            80
        })
    };
    let same = to_scheme.eq_ignore_ascii_case(scheme)
        && to_auth.host().eq_ignore_ascii_case(authority.host())
        && port(to_scheme, to_auth) == port(scheme, authority);
    let path = to.path_and_query().map_or("/", |p| p.as_str());
    same.then(|| format!("{scheme}://{authority}{path}"))
}

#[cfg(test)]
mod tests {
    use super::same_origin;

    #[test]
    fn only_the_same_scheme_host_and_port_is_the_same_origin() {
        let from = "http://k:pw@h:8000/metrics";
        assert_eq!(
            same_origin(from, "/metrics/").as_deref(),
            Some("http://k:pw@h:8000/metrics/")
        );
        assert_eq!(
            same_origin(from, "http://H:8000/x?y=1").as_deref(),
            Some("http://k:pw@h:8000/x?y=1")
        );
        assert_eq!(
            same_origin("http://h/v1/models", "list").as_deref(),
            Some("http://h/v1/list")
        );
        assert_eq!(
            same_origin("http://h/m", "http://h:80/n").as_deref(),
            Some("http://h/n")
        );
        assert_eq!(
            same_origin(from, "//h:8000/m").as_deref(),
            Some("http://k:pw@h:8000/m")
        );
        for other in [
            "http://evil:8000/metrics",
            "https://h:8000/metrics",
            "http://h:8001/metrics",
            "//evil/metrics",
            "javascript:alert(1)",
        ] {
            assert_eq!(same_origin(from, other), None, "{other}");
        }
    }
}
