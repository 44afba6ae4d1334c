//! The registered URL: what an integrator may register and the one normal form it is stored,
//! compared (one registration per URL) and signed (`htu`) in.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Longer than any URL a receiver needs; keeps a stored and signed value bounded.
pub const MAX_URL_LENGTH: usize = 2_048;

/// Why a URL cannot be registered, in words an integrator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("the webhook URL is empty")]
    Empty,
    #[error("the webhook URL is longer than {MAX_URL_LENGTH} characters")]
    TooLong,
    #[error("the webhook URL contains white space or control characters")]
    InvalidCharacters,
    #[error("the webhook URL is not a valid absolute URL ({0})")]
    Malformed(String),
    #[error("the webhook URL must use https, not {0}")]
    NotHttps(String),
    #[error("the webhook URL must not contain a user name or password")]
    UserInfo,
    #[error("the webhook URL must not contain a fragment (#...)")]
    Fragment,
    #[error("the webhook URL has no host")]
    NoHost,
}

/// An https URL in normal form: scheme and host lower-cased (an internationalised host as
/// punycode), the default port 443 dropped, no user information, no fragment, path and query
/// kept as given (an empty path is `/`). Built only by [`normalise`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WebhookUrl {
    text: String,
    /// The host as in the URL (an IPv6 literal in brackets).
    host: String,
    port: u16,
}

impl WebhookUrl {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host as written in the URL: a lower-case DNS name, an IPv4 literal, or an IPv6
    /// literal in brackets (`[2001:db8::1]`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port connected to: 443 unless the URL names another.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as an IP address when the URL names one literally, so it is checked without DNS.
    pub fn ip_literal(&self) -> Option<std::net::IpAddr> {
        self.host.trim_start_matches('[').trim_end_matches(']').parse().ok()
    }
}

impl fmt::Display for WebhookUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for WebhookUrl {
    type Err = UrlError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        normalise(s)
    }
}

impl Serialize for WebhookUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for WebhookUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        normalise(&text).map_err(serde::de::Error::custom)
    }
}

/// Parses an integrator's URL into its normal form, or says why it cannot be registered.
/// Whether its host may be reached is the [`crate::AddressRule`]'s question, asked at
/// registration and again at every attempt.
pub fn normalise(input: &str) -> Result<WebhookUrl, UrlError> {
    if input.is_empty() {
        return Err(UrlError::Empty);
    }
    if input.len() > MAX_URL_LENGTH {
        return Err(UrlError::TooLong);
    }
    // The URL parser would quietly strip or encode these; a URL that needs them is a mistake.
    if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::InvalidCharacters);
    }
    let scheme_end = input.find("://").ok_or_else(|| UrlError::Malformed("it has no scheme://".into()))?;
    let scheme = &input[..scheme_end];
    if !scheme.eq_ignore_ascii_case("https") {
        return Err(UrlError::NotHttps(scheme.to_ascii_lowercase()));
    }
    let parsed = ::url::Url::parse(input).map_err(|e| UrlError::Malformed(e.to_string()))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlError::UserInfo);
    }
    if parsed.fragment().is_some() {
        return Err(UrlError::Fragment);
    }
    let host = match parsed.host() {
        Some(::url::Host::Domain(name)) if !name.is_empty() => name.to_owned(),
        Some(::url::Host::Ipv4(ip)) => ip.to_string(),
        Some(::url::Host::Ipv6(ip)) => format!("[{ip}]"),
        _ => return Err(UrlError::NoHost),
    };
    // The parser already drops :443 for https and lower-cases scheme and host.
    let port = parsed.port_or_known_default().unwrap_or(443);
    let text = String::from(parsed);
    if text.len() > MAX_URL_LENGTH {
        return Err(UrlError::TooLong);
    }
    Ok(WebhookUrl { text, host, port })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(input: &str) -> String {
        normalise(input).expect(input).to_string()
    }

    #[test]
    fn scheme_and_host_are_lower_cased_and_the_default_port_dropped() {
        assert_eq!(ok("HTTPS://Hooks.Example.COM:443/In/Box?a=B"), "https://hooks.example.com/In/Box?a=B");
        assert_eq!(ok("https://hooks.example.com"), "https://hooks.example.com/");
    }

    #[test]
    fn another_port_is_kept() {
        let url = normalise("https://hooks.example.com:8443/x").expect("url");
        assert_eq!(url.as_str(), "https://hooks.example.com:8443/x");
        assert_eq!(url.port(), 8443);
        assert_eq!(url.host(), "hooks.example.com");
        assert_eq!(normalise("https://hooks.example.com/x").expect("url").port(), 443);
    }

    #[test]
    fn path_and_query_are_kept() {
        assert_eq!(ok("https://a.example/Path/To?x=1&y=Two"), "https://a.example/Path/To?x=1&y=Two");
    }

    #[test]
    fn ip_literals_are_hosts() {
        let v4 = normalise("https://127.0.0.1:9000/h").expect("v4");
        assert_eq!(v4.host(), "127.0.0.1");
        assert_eq!(v4.ip_literal(), Some("127.0.0.1".parse().expect("ip")));
        let v6 = normalise("https://[2001:DB8::1]/h").expect("v6");
        assert_eq!(v6.host(), "[2001:db8::1]");
        assert_eq!(v6.as_str(), "https://[2001:db8::1]/h");
        assert_eq!(v6.ip_literal(), Some("2001:db8::1".parse().expect("ip")));
        assert_eq!(normalise("https://a.example/").expect("name").ip_literal(), None);
    }

    #[test]
    fn only_https_is_accepted() {
        assert_eq!(normalise("http://a.example/"), Err(UrlError::NotHttps("http".into())));
        assert_eq!(normalise("ftp://a.example/"), Err(UrlError::NotHttps("ftp".into())));
        assert!(matches!(normalise("a.example/hook"), Err(UrlError::Malformed(_))));
        assert!(matches!(normalise("https:a.example"), Err(UrlError::Malformed(_))));
    }

    #[test]
    fn user_information_fragments_and_empty_hosts_are_refused() {
        assert_eq!(normalise("https://user:pw@a.example/"), Err(UrlError::UserInfo));
        assert_eq!(normalise("https://user@a.example/"), Err(UrlError::UserInfo));
        assert_eq!(normalise("https://a.example/x#frag"), Err(UrlError::Fragment));
        assert_eq!(normalise("https://a.example/x#"), Err(UrlError::Fragment));
        assert!(normalise("https://:8443/path").is_err());
        assert_eq!(normalise(""), Err(UrlError::Empty));
        assert_eq!(normalise(" https://a.example/"), Err(UrlError::InvalidCharacters));
        assert_eq!(normalise("https://a.example/a b"), Err(UrlError::InvalidCharacters));
        assert_eq!(normalise(&format!("https://a.example/{}", "x".repeat(MAX_URL_LENGTH))), Err(UrlError::TooLong));
    }

    #[test]
    fn the_error_says_why_in_words() {
        assert_eq!(
            normalise("http://a.example/").expect_err("http").to_string(),
            "the webhook URL must use https, not http"
        );
    }

    #[test]
    fn serde_is_the_normal_form_as_a_string() {
        let url: WebhookUrl = serde_json::from_str("\"HTTPS://A.example:443/x\"").expect("parse");
        assert_eq!(serde_json::to_string(&url).expect("json"), "\"https://a.example/x\"");
        assert!(serde_json::from_str::<WebhookUrl>("\"http://a.example/\"").is_err());
    }
}
