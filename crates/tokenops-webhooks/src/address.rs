//! The public-address rule (registration rule 1): which IP addresses a webhook may reach, the
//! operator's exemptions (`TOKENOPS_WEBHOOK_ALLOW_CIDRS`), and resolving a URL's host against it.
//!
//! The rule is asked at registration and again at every attempt, and the transport connects only
//! to the addresses it returned, so a name that later resolves to a private address (DNS
//! rebinding) is refused rather than reached.

use ipnet::IpNet;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::url::WebhookUrl;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("the webhook host {host} resolves to {address}, {range}, which webhooks may not reach")]
    Refused { host: String, address: IpAddr, range: &'static str },
    #[error("the webhook host {host} does not resolve: {reason}")]
    Unresolved { host: String, reason: String },
    #[error("the webhook host {host} resolves to no address")]
    NoAddress { host: String },
}

/// The rule: every address outside the special-purpose ranges, plus the allowed CIDRs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressRule {
    allowed: Vec<IpNet>,
}

impl AddressRule {
    /// `allowed` exempts whole ranges from the rule (on-premise receivers, tests); empty means
    /// the spec's rule holds fully.
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// The rule with the exemptions of `TOKENOPS_WEBHOOK_ALLOW_CIDRS` (see [`parse_cidrs`]).
    pub fn from_allow_cidrs(text: &str) -> Result<Self, String> {
        parse_cidrs(text).map(Self::new)
    }

    pub fn allowed(&self) -> &[IpNet] {
        &self.allowed
    }

    pub fn permits(&self, ip: IpAddr) -> bool {
        self.refusal(ip).is_none()
    }

    /// Why `ip` may not be reached (the range it is in), or `None` when it may.
    pub fn refusal(&self, ip: IpAddr) -> Option<&'static str> {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        if self.allowed.iter().any(|net| net.contains(&ip) || mapped.is_some_and(|m| net.contains(&m))) {
            return None;
        }
        match ip {
            IpAddr::V4(v4) => v4_refusal(v4),
            IpAddr::V6(v6) => v6_refusal(v6),
        }
    }

    /// The addresses to connect to for `url`: an IP-literal host checked as it is, a localhost
    /// name (`localhost`, `*.localhost`) as the loopback addresses RFC 6761 reserves it for, any
    /// other name resolved through the system resolver, with every address it resolves to
    /// checked. One refused address refuses the whole host: which address a connection would use
    /// is not ours to choose once the name is shared with a private one.
    pub async fn resolve(&self, url: &WebhookUrl) -> Result<Vec<SocketAddr>, AddressError> {
        self.resolve_with(url, system_lookup).await
    }

    /// [`Self::resolve`] with the name lookup given: the seam that lets a test play a resolver
    /// whose answer changes between lookups.
    pub(crate) async fn resolve_with<F, Fut>(
        &self,
        url: &WebhookUrl,
        lookup: F,
    ) -> Result<Vec<SocketAddr>, AddressError>
    where
        F: FnOnce(String, u16) -> Fut,
        Fut: Future<Output = std::io::Result<Vec<SocketAddr>>>,
    {
        let host = url.host();
        let addresses: Vec<SocketAddr> = match url.ip_literal() {
            Some(ip) => vec![SocketAddr::new(ip, url.port())],
            // Resolvers differ on these (some answer nothing, some ask the network); the name
            // means loopback wherever the service runs, so it is judged as loopback.
            None if is_localhost_name(host) => vec![
                SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), url.port()),
                SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), url.port()),
            ],
            None => {
                let found = lookup(host.to_owned(), url.port())
                    .await
                    .map_err(|e| AddressError::Unresolved { host: host.to_owned(), reason: e.to_string() })?;
                let mut addresses: Vec<SocketAddr> = Vec::new();
                for address in found {
                    if !addresses.contains(&address) {
                        addresses.push(address);
                    }
                }
                addresses
            }
        };
        if addresses.is_empty() {
            return Err(AddressError::NoAddress { host: host.to_owned() });
        }
        for address in &addresses {
            if let Some(range) = self.refusal(address.ip()) {
                return Err(AddressError::Refused { host: host.to_owned(), address: address.ip(), range });
            }
        }
        Ok(addresses)
    }
}

pub(crate) async fn system_lookup(host: String, port: u16) -> std::io::Result<Vec<SocketAddr>> {
    Ok(tokio::net::lookup_host((host.as_str(), port)).await?.collect())
}

/// `localhost` and the names under it (RFC 6761 §6.3), a trailing dot or not.
fn is_localhost_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    name == "localhost" || name.ends_with(".localhost")
}

/// Parses the comma-separated `TOKENOPS_WEBHOOK_ALLOW_CIDRS`: CIDRs (`10.0.0.0/8`, `fd00::/8`)
/// or single addresses; blanks between commas are ignored; host bits are cleared.
pub fn parse_cidrs(text: &str) -> Result<Vec<IpNet>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.parse::<IpNet>()
                .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| format!("{item:?} is not a CIDR such as 10.0.0.0/8 or an IP address"))
        })
        .collect()
}

fn v4_refusal(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    let range = match (a, b, c) {
        _ if ip.is_broadcast() => "the broadcast address",
        (0, _, _) => "an unspecified (this-network) address",
        (10, _, _) | (192, 168, _) => "a private address",
        (172, _, _) if b & 0xF0 == 16 => "a private address",
        (100, _, _) if b & 0xC0 == 64 => "a carrier-grade NAT address",
        (127, _, _) => "a loopback address",
        (169, 254, _) => "a link-local address",
        (192, 0, 0) => "an IETF protocol assignment address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (192, 88, 99) => "a 6to4 relay anycast address",
        (198, _, _) if b & 0xFE == 18 => "a benchmarking address",
        (224..=239, _, _) => "a multicast address",
        (240..=255, _, _) => "a reserved address",
        _ => return None,
    };
    Some(range)
}

fn v6_refusal(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_refusal(v4).map(|_| "an IPv4-mapped IPv6 address of a non-public IPv4 address");
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let range = match s {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "a loopback address",
        // ::/96, the deprecated IPv4-compatible form.
        [0, 0, 0, 0, 0, 0, _, _] => "an IPv4-compatible IPv6 address",
        // ::ffff:0:0/96, the IPv4-translated form (RFC 2765): a translator reaches the IPv4
        // address it embeds, so it is judged as that address.
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => {
            return v4_refusal(embedded(hi, lo))
                .map(|_| "an IPv4-translated IPv6 address of a non-public IPv4 address");
        }
        // NAT64 (RFC 6052): reaches whatever IPv4 address it embeds.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => {
            return v4_refusal(embedded(hi, lo)).map(|_| "a NAT64 address of a non-public IPv4 address");
        }
        [0x64, 0xff9b, 1, ..] => "a local-use NAT64 address",
        [0x100, 0, 0, 0, ..] => "a discard-only address",
        [0x2001, 0xdb8, ..] => "a documentation address",
        [0x3fff, b, ..] if b & 0xF000 == 0 => "a documentation address",
        [0x2001, 0x2, 0, ..] => "a benchmarking address",
        [0x2001, 0, ..] => "a Teredo tunnel address",
        // 6to4: reaches the IPv4 address it embeds.
        [0x2002, hi, lo, ..] => {
            return v4_refusal(embedded(hi, lo)).map(|_| "a 6to4 address of a non-public IPv4 address");
        }
        [a, ..] if a & 0xFE00 == 0xFC00 => "a unique local address",
        [a, ..] if a & 0xFFC0 == 0xFE80 => "a link-local address",
        [a, ..] if a & 0xFFC0 == 0xFEC0 => "a site-local address",
        [a, ..] if a & 0xFF00 == 0xFF00 => "a multicast address",
        _ => return None,
    };
    Some(range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().expect(text)
    }

    #[test]
    fn public_addresses_are_permitted() {
        let rule = AddressRule::default();
        for text in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "::ffff:0:8.8.8.8",
        ] {
            assert!(rule.permits(ip(text)), "{text} should be permitted");
        }
    }

    #[test]
    fn every_special_purpose_range_is_refused() {
        let rule = AddressRule::default();
        let cases = [
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "carrier-grade NAT"),
            ("100.127.255.254", "carrier-grade NAT"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("192.0.2.10", "documentation"),
            ("198.51.100.10", "documentation"),
            ("203.0.113.10", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.1", "benchmarking"),
            ("192.0.0.8", "IETF"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:10.0.0.1", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::10.0.0.1", "IPv4-compatible"),
            ("::ffff:0:127.0.0.1", "IPv4-translated"),
            ("::ffff:0:a00:1", "IPv4-translated"),
            ("::ffff:0:169.254.169.254", "IPv4-translated"),
            ("64:ff9b::a00:1", "NAT64"),
            ("2002:a00:1::1", "6to4"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("2001::1", "Teredo"),
            ("100::1", "discard"),
        ];
        for (text, word) in cases {
            let refusal = rule.refusal(ip(text)).unwrap_or_else(|| panic!("{text} should be refused"));
            assert!(refusal.contains(word), "{text}: {refusal} should mention {word}");
        }
    }

    #[test]
    fn an_allowed_cidr_exempts_its_range_only() {
        let rule = AddressRule::new(parse_cidrs("127.0.0.0/8, fd00::/8").expect("cidrs"));
        assert!(rule.permits(ip("127.0.0.1")));
        assert!(rule.permits(ip("::ffff:127.0.0.1")));
        assert!(rule.permits(ip("fd00::5")));
        assert!(!rule.permits(ip("10.0.0.1")));
        assert!(!rule.permits(ip("::1")));
        assert!(!rule.permits(ip("fc00::1")));
    }

    #[test]
    fn allow_cidrs_parse_as_configured() {
        assert_eq!(parse_cidrs("").expect("empty"), Vec::<IpNet>::new());
        assert_eq!(parse_cidrs(" , ").expect("blank"), Vec::<IpNet>::new());
        let nets = parse_cidrs("10.1.2.3/8,192.168.0.7").expect("nets");
        assert_eq!(nets, vec!["10.0.0.0/8".parse::<IpNet>().expect("net"), "192.168.0.7/32".parse().expect("net")]);
        let error = parse_cidrs("10.0.0.0/8,banana").expect_err("banana");
        assert!(error.contains("banana"), "{error}");
        assert!(parse_cidrs("10.0.0.0/33").is_err());
    }

    #[tokio::test]
    async fn an_ip_literal_host_is_checked_without_dns() {
        let url = crate::url::normalise("https://127.0.0.1:8443/hook").expect("url");
        let error = AddressRule::default().resolve(&url).await.expect_err("loopback");
        assert!(matches!(error, AddressError::Refused { range, .. } if range.contains("loopback")), "{error}");
        assert!(error.to_string().contains("127.0.0.1"), "{error}");
        let allowed = AddressRule::new(parse_cidrs("127.0.0.0/8").expect("cidr"));
        assert_eq!(allowed.resolve(&url).await.expect("allowed"), vec!["127.0.0.1:8443".parse().expect("addr")]);
    }

    #[tokio::test]
    async fn a_name_is_refused_when_it_resolves_to_a_refused_address() {
        let url = crate::url::normalise("https://localhost:9/hook").expect("url");
        let error = AddressRule::default().resolve(&url).await.expect_err("localhost");
        assert!(matches!(error, AddressError::Refused { .. }), "{error}");
        let allowed = AddressRule::new(parse_cidrs("127.0.0.0/8,::1/128").expect("cidr"));
        let addresses = allowed.resolve(&url).await.expect("allowed");
        assert!(addresses.iter().all(|a| a.port() == 9 && a.ip().is_loopback()), "{addresses:?}");
    }

    #[tokio::test]
    async fn an_unresolvable_name_says_so() {
        let url = crate::url::normalise("https://no-such-host.invalid/hook").expect("url");
        let error = AddressRule::default().resolve(&url).await.expect_err("invalid");
        assert!(matches!(error, AddressError::Unresolved { .. } | AddressError::NoAddress { .. }), "{error}");
    }

    #[tokio::test]
    async fn localhost_names_are_loopback_without_asking_a_resolver() {
        let rule = AddressRule::default();
        for host in ["localhost", "localhost.", "api.localhost", "deep.name.localhost."] {
            let url = crate::url::normalise(&format!("https://{host}:8443/hook")).expect("url");
            let lookup = |_: String, _: u16| async { panic!("{host} was looked up") };
            let error = rule.resolve_with(&url, lookup).await.expect_err(host);
            assert!(matches!(error, AddressError::Refused { range, .. } if range.contains("loopback")), "{error}");
        }
        let not_localhost = crate::url::normalise("https://localhost.example/hook").expect("url");
        let public = |_: String, port: u16| async move { Ok(vec![SocketAddr::new(ip("93.184.216.34"), port)]) };
        assert_eq!(rule.resolve_with(&not_localhost, public).await.expect("public").len(), 1);
    }

    #[tokio::test]
    async fn one_private_answer_among_public_ones_refuses_the_name() {
        let url = crate::url::normalise("https://mixed.example/hook").expect("url");
        let answers = |_: String, port: u16| async move {
            Ok(vec![SocketAddr::new(ip("93.184.216.34"), port), SocketAddr::new(ip("10.0.0.7"), port)])
        };
        let error = AddressRule::default().resolve_with(&url, answers).await.expect_err("mixed");
        assert!(matches!(error, AddressError::Refused { address, .. } if address == ip("10.0.0.7")), "{error}");
    }
}
