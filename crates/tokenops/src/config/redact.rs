//! Passwords hidden from URLs before they reach a message or a log: database, SMTP, signer and
//! key-set URLs all pass through `redact_url`.

/// A database URL with its passwords hidden, for messages and logs: the one in the user info
/// (`user:password@`) and any `password` query parameter (`?user=u&password=secret`, which
/// PostgreSQL URLs accept as well).
pub fn redact_url(url: &str) -> String {
    let url = redact_user_info(url);
    let Some(query_start) = url.find('?') else { return url };
    // No fragment is split off: database URLs have none, and a '#' inside a password value
    // must not end the redaction.
    let (base, query) = url.split_at(query_start + 1);
    let mut parts = Vec::new();
    // Inside a password value: a raw '&' in it would otherwise leak the rest of the value as a
    // parameter without '=', so such pieces are hidden as well.
    let mut in_password = false;
    for piece in query.split('&') {
        match piece.split_once('=') {
            Some((name, _)) if is_password_parameter(name) => {
                in_password = true;
                parts.push(format!("{name}=***"));
            }
            Some(_) => {
                in_password = false;
                parts.push(piece.to_owned());
            }
            None if in_password => {}
            None => parts.push(piece.to_owned()),
        }
    }
    format!("{base}{}", parts.join("&"))
}

/// `password`, and its variants such as libpq's `sslpassword`, in any case.
fn is_password_parameter(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with("password")
}

fn redact_user_info(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else { return url.to_owned() };
    let rest = &url[scheme_end + 3..];
    // The user info ends at the last '@' before the query; if there is none there, at the last
    // '@' of all, which may hide too much (a '@' in the query) but never too little (a '?' in
    // the password).
    let before_query = rest.find('?').map_or(rest, |q| &rest[..q]);
    let Some(at) = before_query.rfind('@').or_else(|| rest.rfind('@')) else { return url.to_owned() };
    match rest[..at].split_once(':') {
        Some((user, _)) => format!("{}{user}:***{}", &url[..scheme_end + 3], &rest[at..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_url_hides_passwords_in_user_info_and_query() {
        for (url, redacted) in [
            ("postgres://u:secret@host/db", "postgres://u:***@host/db"),
            ("postgres://u:p@ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:pa?ss@host/db", "postgres://u:***@host/db"),
            ("postgres://u:secret@host/db?sslmode=require&x=a@b", "postgres://u:***@host/db?sslmode=require&x=a@b"),
            ("postgres://u@host/db", "postgres://u@host/db"),
            ("postgres://host/db?user=u&password=secret", "postgres://host/db?user=u&password=***"),
            ("postgres://host/db?password=secret&user=u", "postgres://host/db?password=***&user=u"),
            ("postgres://host/db?user=u&PASSWORD=secret", "postgres://host/db?user=u&PASSWORD=***"),
            ("postgres://host/db?sslpassword=secret", "postgres://host/db?sslpassword=***"),
            ("postgres://host/db?password=se&cret&user=u", "postgres://host/db?password=***&user=u"),
            ("postgres://host/db?password=se#cret", "postgres://host/db?password=***"),
            ("postgres://u:secret@host/db?password=other", "postgres://u:***@host/db?password=***"),
            ("postgres://host/db?sslmode=require", "postgres://host/db?sslmode=require"),
            ("sqlite://./data/tokenops.db", "sqlite://./data/tokenops.db"),
        ] {
            assert_eq!(redact_url(url), redacted, "{url}");
            assert!(!redact_url(url).contains("secret") && !redact_url(url).contains("cret"), "{url}");
        }
    }
}
