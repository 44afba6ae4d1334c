//! Query parameters as an ordered multi-map, because the spec repeats some (`sort`, `actorIds`).
//! Unknown parameters are ignored; a known one that must appear once and appears twice is 400.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokenops_app::Error;
use tokenops_domain::Timestamp;
use uuid::Uuid;

use crate::error::ApiError;

#[derive(Debug, Clone, Default)]
pub struct QueryParams(pub Vec<(String, String)>);

impl QueryParams {
    pub fn parse(query: &str) -> Self {
        Self(form_urlencoded::parse(query.as_bytes()).into_owned().collect())
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|(k, _)| k == name)
    }

    /// The single value of `name`, if given.
    pub fn one(&self, name: &str) -> Result<Option<&str>, Error> {
        let mut values = self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let first = values.next();
        if values.next().is_some() {
            return Err(Error::invalid_field(name, "must be given at most once"));
        }
        Ok(first)
    }

    /// The single value of `name`, trimmed; none when it is absent or blank, since a blank
    /// filter filters nothing.
    pub fn non_blank(&self, name: &str) -> Result<Option<&str>, Error> {
        Ok(self.one(name)?.map(str::trim).filter(|v| !v.is_empty()))
    }

    /// Every value of a repeatable parameter, comma-separated values split.
    pub fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .flat_map(|(_, v)| {
                v.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every raw value of `name`, unsplit.
    pub fn raw_all(&self, name: &str) -> Vec<&str> {
        self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect()
    }

    /// An optional ISO 8601 instant.
    pub fn timestamp(&self, name: &str) -> Result<Option<Timestamp>, Error> {
        self.one(name)?.map(|v| Timestamp::parse_iso8601(v).map_err(|e| Error::invalid_field(name, e))).transpose()
    }

    /// An optional UUID.
    pub fn uuid(&self, name: &str) -> Result<Option<Uuid>, Error> {
        self.one(name)?.map(|v| crate::extract::path::uuid_param(name, v)).transpose()
    }

    /// A half-open time window `[from, to)` given by two optional instants; `from` must be
    /// before `to` when both are given (the spec's "from not before to" is 400).
    pub fn window(&self, from: &str, to: &str) -> Result<(Option<Timestamp>, Option<Timestamp>), Error> {
        self.bounded_window(from, to, false)
    }

    /// A half-open time window that may be empty: only an inverted one (`from` after `to`) is
    /// refused, where the spec's 400 is for an "inverted range" (audit, approval requests);
    /// `from` equal to `to` selects nothing.
    pub fn window_not_inverted(&self, from: &str, to: &str) -> Result<(Option<Timestamp>, Option<Timestamp>), Error> {
        self.bounded_window(from, to, true)
    }

    fn bounded_window(
        &self,
        from: &str,
        to: &str,
        may_be_empty: bool,
    ) -> Result<(Option<Timestamp>, Option<Timestamp>), Error> {
        let (start, end) = (self.timestamp(from)?, self.timestamp(to)?);
        if let (Some(start), Some(end)) = (start, end) {
            let (in_order, rule) =
                if may_be_empty { (start <= end, "must not be after") } else { (start < end, "must be before") };
            if !in_order {
                return Err(Error::invalid_field(from, format!("{rule} {to}")));
            }
        }
        Ok((start, end))
    }

    /// An optional value of a closed vocabulary, given by its wire text: one of `values` (400
    /// naming them all otherwise).
    pub fn one_of<T: Copy>(
        &self,
        name: &str,
        values: &[T],
        text: impl Fn(T) -> &'static str,
    ) -> Result<Option<T>, Error> {
        let Some(given) = self.one(name)? else { return Ok(None) };
        let found = values.iter().copied().find(|v| text(*v) == given);
        found.map(Some).ok_or_else(|| {
            let allowed: Vec<&str> = values.iter().map(|v| text(*v)).collect();
            Error::invalid_field(name, format!("unknown value {given:?}; allowed: {}", allowed.join(", ")))
        })
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let params = Self::parse(parts.uri.query().unwrap_or(""));
        for (name, value) in &params.0 {
            without_nul(name, name)?;
            without_nul(name, value)?;
        }
        Ok(params)
    }
}

/// A NUL (`%00`) in a query parameter is 400: no stored text holds one, and PostgreSQL refuses
/// it in a text parameter, which would otherwise surface as a store failure (500). (A path value
/// is read by its own rule: a reference that cannot be one is 404.)
pub fn without_nul(name: &str, value: &str) -> Result<(), Error> {
    if value.contains('\0') {
        return Err(Error::invalid_field(name, "must not contain NUL (%00) characters"));
    }
    Ok(())
}
