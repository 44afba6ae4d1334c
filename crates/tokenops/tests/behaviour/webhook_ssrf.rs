//! The SSRF battery (issue 19; registration rule 1, supplement §1): address tricks refused by
//! `POST /api/webhooks` with a 400 naming the problem, listeners on the loopback addresses
//! they name never contacted, and a redirect to a private address never followed, on both stores.
//!
//! A name whose answer changes between lookups needs a resolver the test controls, which the
//! service's system resolver is not: the pinning (one lookup per attempt, the connection only to
//! the checked addresses) is tested in `tokenops-webhooks` (`transport.rs`) instead.

use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokenops_testkit::webhook_receiver::Response;
use tokenops_testkit::{Backend, Reply, TestApp, backends};

use crate::webhooks::{WAIT, app_with_receiver, assert_status, register};

/// A plain TCP listener that counts the connections it accepts: a refused address that is
/// reachable locally, watched for any contact.
struct Watched {
    address: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Watched {
    /// Listens on `ip` at `port` (0: any free port); `None` when this machine cannot bind it.
    async fn bind(ip: &str, port: u16) -> Option<Watched> {
        let listener = tokio::net::TcpListener::bind((ip, port)).await.ok()?;
        let address = listener.local_addr().ok()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Some(Watched { address, accepted })
    }

    fn port(&self) -> u16 {
        self.address.port()
    }

    fn contacts(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Proves the listener would have seen a contact: connects once and waits for the count.
    async fn assert_it_counts(&self) {
        let before = self.contacts();
        let _stream = tokio::net::TcpStream::connect(self.address).await.expect("connect to the watched listener");
        let until = Instant::now() + WAIT;
        while self.contacts() == before {
            assert!(Instant::now() < until, "the listener on {} counts no connection", self.address);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[track_caller]
fn assert_refused(reply: &Reply, url: &str, word: &str) {
    assert_status(reply, 400, &format!("{url} should be refused"));
    let text = reply.body.to_string();
    assert!(text.contains(word), "{url}: the answer should name {word:?}: {text}");
}

backends!(address_tricks_are_refused_and_never_contacted, a_redirect_to_a_private_address_is_never_followed);

async fn address_tricks_are_refused_and_never_contacted(backend: Backend) {
    // No TOKENOPS_WEBHOOK_ALLOW_CIDRS: the spec's rule holds fully.
    let app = TestApp::spawn(backend).await;
    let loopback = Watched::bind("127.0.0.1", 0).await.expect("a listener on 127.0.0.1");
    let p = loopback.port();
    // The same port on other loopback addresses, where this machine has them.
    let high = Watched::bind("127.0.0.255", p).await;
    let v6 = Watched::bind("::1", p).await;

    let m = "an IPv4-mapped IPv6 address";
    let cases: Vec<(String, &str)> = vec![
        // Each private range, its edges.
        ("https://10.0.0.1/hook".into(), "a private address"),
        ("https://10.255.255.254/hook".into(), "a private address"),
        ("https://172.16.0.1/hook".into(), "a private address"),
        ("https://172.31.255.254/hook".into(), "a private address"),
        ("https://192.168.0.1/hook".into(), "a private address"),
        ("https://192.168.255.254/hook".into(), "a private address"),
        // Loopback, this network, link-local (the cloud metadata service), carrier-grade NAT.
        (format!("https://127.0.0.1:{p}/hook"), "a loopback address"),
        (format!("https://127.1:{p}/hook"), "a loopback address"),
        (format!("https://127.0.0.255:{p}/hook"), "a loopback address"),
        (format!("https://0.0.0.0:{p}/hook"), "an unspecified (this-network) address"),
        ("https://169.254.169.254/latest/meta-data/".into(), "a link-local address"),
        ("https://100.64.0.1/hook".into(), "a carrier-grade NAT address"),
        ("https://100.127.255.254/hook".into(), "a carrier-grade NAT address"),
        // Multicast, broadcast, reserved, documentation and benchmarking.
        ("https://224.0.0.1/hook".into(), "a multicast address"),
        ("https://239.255.255.250/hook".into(), "a multicast address"),
        ("https://255.255.255.255/hook".into(), "the broadcast address"),
        ("https://240.0.0.1/hook".into(), "a reserved address"),
        ("https://192.0.2.1/hook".into(), "a documentation address"),
        ("https://198.51.100.1/hook".into(), "a documentation address"),
        ("https://203.0.113.1/hook".into(), "a documentation address"),
        ("https://198.18.0.1/hook".into(), "a benchmarking address"),
        // IPv6 forms.
        (format!("https://[::1]:{p}/hook"), "a loopback address"),
        (format!("https://[::]:{p}/hook"), "an unspecified address"),
        ("https://[fc00::1]/hook".into(), "a unique local address"),
        ("https://[fd12::1]/hook".into(), "a unique local address"),
        ("https://[fe80::1]/hook".into(), "a link-local address"),
        ("https://[fec0::1]/hook".into(), "a site-local address"),
        ("https://[ff02::1]/hook".into(), "a multicast address"),
        (format!("https://[::ffff:127.0.0.1]:{p}/hook"), m),
        (format!("https://[::ffff:7f00:1]:{p}/hook"), m),
        ("https://[::ffff:169.254.169.254]/hook".into(), m),
        ("https://[::ffff:a00:1]/hook".into(), m),
        (format!("https://[::127.0.0.1]:{p}/hook"), "an IPv4-compatible IPv6 address"),
        ("https://[::ffff:0:10.0.0.1]/hook".into(), "an IPv4-translated IPv6 address"),
        (format!("https://[::ffff:0:7f00:1]:{p}/hook"), "an IPv4-translated IPv6 address"),
        ("https://[64:ff9b::10.0.0.1]/hook".into(), "a NAT64 address"),
        ("https://[64:ff9b::a9fe:a9fe]/hook".into(), "a NAT64 address"),
        ("https://[64:ff9b:1::1]/hook".into(), "a local-use NAT64 address"),
        ("https://[2002:c0a8:1::1]/hook".into(), "a 6to4 address"),
        ("https://[2001:db8::1]/hook".into(), "a documentation address"),
        // Other spellings of IPv4: decimal, octal, hex, mixed, short, trailing dot, encoded.
        (format!("https://2130706433:{p}/hook"), "a loopback address"),
        (format!("https://0177.0.0.1:{p}/hook"), "a loopback address"),
        (format!("https://0x7f.0.0.1:{p}/hook"), "a loopback address"),
        (format!("https://0x7f000001:{p}/hook"), "a loopback address"),
        (format!("https://017700000001:{p}/hook"), "a loopback address"),
        (format!("https://0x7f.1:{p}/hook"), "a loopback address"),
        (format!("https://0177.0.0x0.1:{p}/hook"), "a loopback address"),
        ("https://012.0.0.1/hook".into(), "a private address"),
        ("https://0xa9fea9fe/latest/meta-data/".into(), "a link-local address"),
        ("https://0xc0.0xa8.1.1/hook".into(), "a private address"),
        (format!("https://127.0.0.1.:{p}/hook"), "a loopback address"),
        (format!("https://%31%32%37.0.0.1:{p}/hook"), "a loopback address"),
        (format!("https://\u{ff11}\u{ff12}\u{ff17}.0.0.1:{p}/hook"), "a loopback address"),
        // Names that resolve to loopback, with no DNS on the network.
        (format!("https://localhost:{p}/hook"), "a loopback address"),
        (format!("HTTPS://LocalHost:{p}/hook"), "a loopback address"),
        (format!("https://localhost.:{p}/hook"), "a loopback address"),
        (format!("https://ssrf.localhost:{p}/hook"), "a loopback address"),
        (format!("https://metadata.internal.localhost:{p}/hook"), "a loopback address"),
        // The URL's other tricks.
        (format!("https://public.example@127.0.0.1:{p}/hook"), "must not contain a user name"),
        (format!("https://public.example:443@127.0.0.1:{p}/hook"), "must not contain a user name"),
        (format!("http://127.0.0.1:{p}/hook"), "must use https, not http"),
        ("http://public.example/hook".into(), "must use https, not http"),
        (format!("https://127.0.0.1:{p}#@public.example/hook"), "must not contain a fragment"),
    ];
    assert!(cases.len() >= 30);
    for (url, word) in &cases {
        let reply = app.post("/api/webhooks", &json!({ "url": url, "eventTypes": ["webhook.test"] })).await;
        assert_refused(&reply, url, word);
    }
    assert_eq!(app.db.count("webhooks", "").await, 0, "nothing registered");

    // Whatever is due has run: nothing reached a refused address.
    app.drain_jobs().await;
    assert_eq!(loopback.contacts(), 0, "127.0.0.1 was contacted");
    loopback.assert_it_counts().await;
    for watched in [&high, &v6].into_iter().flatten() {
        assert_eq!(watched.contacts(), 0, "{} was contacted", watched.address);
        watched.assert_it_counts().await;
    }
}

async fn a_redirect_to_a_private_address_is_never_followed(backend: Backend) {
    // Only the receiver's own address is exempt; 127.0.0.2 is loopback like any other.
    let (app, receiver) = app_with_receiver(
        backend,
        &[("TOKENOPS_WEBHOOK_ALLOW_CIDRS", "127.0.0.1/32"), ("TOKENOPS_WEBHOOK_RETRY_BASE_MS", "100")],
    )
    .await;
    let private = Watched::bind("127.0.0.2", 0).await.expect("a listener on 127.0.0.2");
    let q = private.port();
    let direct = format!("https://127.0.0.2:{q}/private");
    let refused = app.post("/api/webhooks", &json!({ "url": direct, "eventTypes": ["webhook.test"] })).await;
    assert_refused(&refused, &direct, "a loopback address");

    let location = format!("http://127.0.0.2:{q}/private");
    receiver.respond("/moved", Response::Redirect(location.clone()));
    let created = register(&app, &receiver.url("/moved"), &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/moved", 1, WAIT).await;
    let events = app.get(&format!("/api/webhook-events?webhookId={id}")).await;
    events.expect(200);
    let event_id = events.body["items"][0]["id"].as_str().expect("the test event").to_owned();
    let event = app.get(&format!("/api/webhook-events/{event_id}")).await;
    event.expect(200);
    let delivery = &event.body["deliveries"][0];
    assert_eq!(delivery["status"], "RETRY_PENDING", "a 302 is a failed attempt: {delivery}");
    assert_eq!(delivery["attempts"], 1, "{delivery}");

    // A retry meets the same redirect, to other private spellings too; the test endpoint too.
    receiver.respond("/moved", Response::Redirect(format!("https://[::ffff:127.0.0.2]:{q}/private")));
    app.clock.advance_millis(15_000);
    app.drain_jobs().await;
    receiver.wait_for_path("/moved", 2, WAIT).await;
    receiver.respond("/moved", Response::Redirect("https://169.254.169.254/latest/meta-data/".into()));
    let tested = app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await;
    tested.expect(200);
    assert_eq!(tested.body["delivered"], false, "{}", tested.body);
    assert_eq!(tested.body["statusCode"], 302, "{}", tested.body);
    let moved = receiver.requests_to("/moved");
    assert_eq!(moved.len(), 3, "three attempts, each to the registered URL only");
    assert!(receiver.requests_to("/private").is_empty(), "a redirect was followed");
    let event = app.get(&format!("/api/webhook-events/{event_id}")).await;
    assert_eq!(event.body["deliveries"][0]["status"], "RETRY_PENDING", "{}", event.body);
    assert_eq!(event.body["deliveries"][0]["attempts"], 2, "{}", event.body);

    assert_eq!(private.contacts(), 0, "the redirect's private target {location} was contacted");
    private.assert_it_counts().await;
}
