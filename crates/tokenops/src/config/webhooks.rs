//! Webhook delivery's settings: the address exemptions, the extra CA, the retry base, the replay
//! budget, attempts in flight per destination and the JWS key's rotation.

use super::sources::Reader;
use std::path::PathBuf;
use tokenops_webhooks::destinations::DEFAULT_MAX_IN_FLIGHT;

pub(super) struct Webhooks {
    pub allow_cidrs: Vec<String>,
    pub ca_file: Option<PathBuf>,
    pub retry_base_ms: i64,
    pub replay_budget: u64,
    pub max_in_flight_per_destination: usize,
    pub jws_key_rotation_days: u32,
}

pub(super) fn read(r: &mut Reader) -> Webhooks {
    let allow_cidrs: Vec<String> = r
        .text("TOKENOPS_WEBHOOK_ALLOW_CIDRS")
        .map(|v| v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default();
    for cidr in &allow_cidrs {
        if !valid_cidr(cidr) {
            r.problems.push(format!("TOKENOPS_WEBHOOK_ALLOW_CIDRS: {cidr:?} is not a CIDR such as 10.0.0.0/8"));
        }
    }
    let ca_file = r.text("TOKENOPS_WEBHOOK_CA_FILE").map(PathBuf::from);
    if let Some(path) = &ca_file
        && !path.is_file()
    {
        r.problems.push(format!("TOKENOPS_WEBHOOK_CA_FILE={}: no such file", path.display()));
    }
    let retry_base_ms = r.integer("TOKENOPS_WEBHOOK_RETRY_BASE_MS", 30_000, 1, 3_600_000);
    let replay_budget = r.integer("TOKENOPS_WEBHOOK_REPLAY_BUDGET", 1_000, 1, 1_000_000).unsigned_abs();
    let max_in_flight_per_destination =
        r.count("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", DEFAULT_MAX_IN_FLIGHT, 1, 256);
    // Never by default: the spec says signing-key rotation is not implemented for JWS_ES256, so
    // a receiver built to it may pin the key; an operator who wants rotation opts in.
    let jws_key_rotation_days =
        u32::try_from(r.integer("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", 0, 0, 3_650)).unwrap_or(0);
    Webhooks {
        allow_cidrs,
        ca_file,
        retry_base_ms,
        replay_budget,
        max_in_flight_per_destination,
        jws_key_rotation_days,
    }
}

fn valid_cidr(text: &str) -> bool {
    let Some((addr, prefix)) = text.split_once('/') else { return false };
    let Ok(addr) = addr.parse::<std::net::IpAddr>() else { return false };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    prefix.parse::<u8>().is_ok_and(|p| p <= max)
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load;

    #[test]
    fn webhook_destination_bound_and_key_rotation() {
        let c = load(&[]).expect("valid");
        assert_eq!((c.webhook_max_in_flight_per_destination, c.webhook_jws_key_rotation_days), (8, 0));
        let c = load(&[
            ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "2"),
            ("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", "90"),
        ])
        .expect("valid");
        assert_eq!((c.webhook_max_in_flight_per_destination, c.webhook_jws_key_rotation_days), (2, 90));
        let e = load(&[
            ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "0"),
            ("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", "-1"),
        ])
        .expect_err("invalid");
        for name in ["TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS"] {
            assert!(e.to_string().contains(name), "{name} missing from {e}");
        }
    }
}
