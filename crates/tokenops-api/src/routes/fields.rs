//! Text fields of request bodies, checked the same way on every route: trimmed, required or
//! optional, never blank, bounded in length; an email address as a user's or an owner's; a key
//! a resource is named by (a group's, a template's); a required field and a version number of
//! any body; the rule that a change sends something; and `all_fields!`, which parses a body's
//! fields at once so that one 400 names every field found wrong.

use tokenops_app::Error;
use tokenops_app::error::FieldError;

/// Every field of a body parsed at once: `Ok` with the values in order, or the 400 that names
/// every field found wrong (in `details`), rather than one field per round trip.
/// `all_fields!(a = parse_a, b = parse_b)` gives `Result<(A, B), Error>`.
macro_rules! all_fields {
    ($($name:ident = $parsed:expr),+ $(,)?) => {{
        $(let $name = $parsed;)+
        match ($($name,)+) {
            ($(Ok($name),)+) => Ok(($($name,)+)),
            ($($name,)+) => Err($crate::routes::fields::field_errors([$($name.err(),)+])),
        }
    }};
}
pub(crate) use all_fields;

/// The 400 of the fields found wrong: one error as it was made, several as one whose message
/// lists them and whose `details` hold each.
pub fn field_errors<const N: usize>(errors: [Option<Error>; N]) -> Error {
    let mut errors: Vec<Error> = errors.into_iter().flatten().collect();
    if errors.len() == 1 {
        return errors.remove(0);
    }
    validation_failed(errors.into_iter().flat_map(|e| e.details).collect())
}

/// The 400 that names several fields found wrong: its message lists them, `details` holds
/// each (every body that reports all its problems at once answers so).
pub fn validation_failed(details: Vec<FieldError>) -> Error {
    let summary: Vec<String> = details.iter().map(|f| format!("{}: {}", f.field, f.message)).collect();
    Error::bad_request(format!("Validation failed: {}", summary.join("; "))).with_details(details)
}

/// A field the body must send: 400 `is required` when it is absent (or null).
pub fn required<T>(field: &str, value: Option<T>) -> Result<T, Error> {
    value.ok_or_else(|| Error::invalid_field(field, "is required"))
}

/// A version number sent as a JSON integer: 1 or more.
pub fn version_number(field: &str, value: i64) -> Result<u32, Error> {
    u32::try_from(value)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| Error::invalid_field(field, "must be a positive integer"))
}

/// A required, non-blank text of at most `max` characters (trimmed).
pub fn text(field: &str, value: Option<String>, max: usize) -> Result<String, Error> {
    let value = required(field, value)?;
    optional_text(field, Some(value), max)?.ok_or_else(|| Error::invalid_field(field, "must not be blank"))
}

/// An optional text: when sent, non-blank and at most `max` characters (trimmed).
pub fn optional_text(field: &str, value: Option<String>, max: usize) -> Result<Option<String>, Error> {
    let Some(value) = value else { return Ok(None) };
    let value = value.trim().to_owned();
    if value.is_empty() {
        return Err(Error::invalid_field(field, "must not be blank"));
    }
    if value.chars().count() > max {
        return Err(Error::invalid_field(field, format!("must be at most {max} characters")));
    }
    Ok(Some(value))
}

/// The longest first or last name of a person: a user's, and an organisation's owner's, who
/// becomes its first user.
pub const PERSON_NAME_MAX: usize = 100;

/// The longest email address this service takes (the SMTP path limit).
const EMAIL_MAX: usize = 254;

/// A required email address: text of at most 254 characters, one `@` between a local part and
/// a domain of non-empty labels, no white space or control characters.
pub fn email(field: &str, value: Option<String>) -> Result<String, Error> {
    let email = text(field, value, EMAIL_MAX)?;
    // The invitation is mailed here: a text no mail can reach ("ab@", "a@b@c") is refused now
    // rather than lost in the outbox. Deliberately loose beyond that (any local part, any
    // domain name, international ones too): the mail server is the judge of the rest.
    let deliverable = match email.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty() && !domain.contains('@') && !domain.is_empty() && domain.split('.').all(|l| !l.is_empty())
        }
        None => false,
    };
    if !deliverable || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Error::invalid_field(field, "is not an email address"));
    }
    Ok(email)
}

/// A required key of at most `max` characters: letters, digits, `_`, `-` or `.`, starting with a
/// letter or digit.
pub fn key(field: &str, value: Option<String>, max: usize) -> Result<String, Error> {
    let key = text(field, value, max)?;
    let valid = key.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(Error::invalid_field(
            field,
            "must be letters, digits, '_', '-' or '.', starting with a letter or digit",
        ));
    }
    Ok(key)
}

/// A change (PATCH) sends at least one of its fields: otherwise 400 `Nothing to change: send
/// {fields}`, its detail against the body (no one field is at fault). `sent` holds, per field,
/// whether the body sent it.
pub fn something_to_change(sent: &[bool], fields: &str) -> Result<(), Error> {
    if sent.contains(&true) { Ok(()) } else { Err(Error::nothing_to_change(&format!("send {fields}"))) }
}
