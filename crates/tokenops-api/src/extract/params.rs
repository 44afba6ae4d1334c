//! Query parameters as an ordered multi-map, because the spec repeats some (`sort`, `actorIds`).
//! Unknown parameters are ignored; a known one that must appear once and appears twice is 400.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use tokenops_app::Error;
use tokenops_domain::Timestamp;

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

    /// A half-open time window `[from, to)` given by two optional instants; `from` must be
    /// before `to` when both are given.
    pub fn window(&self, from: &str, to: &str) -> Result<(Option<Timestamp>, Option<Timestamp>), Error> {
        let (start, end) = (self.timestamp(from)?, self.timestamp(to)?);
        if let (Some(start), Some(end)) = (start, end)
            && start >= end
        {
            return Err(Error::invalid_field(from, format!("must be before {to}")));
        }
        Ok((start, end))
    }

    /// An optional value that must be one of `allowed` (400 naming them otherwise).
    pub fn choice<T: Copy>(
        &self,
        name: &str,
        parse: impl Fn(&str) -> Option<T>,
        allowed: &[&str],
    ) -> Result<Option<T>, Error> {
        self.one(name)?
            .map(|v| {
                parse(v).ok_or_else(|| {
                    Error::invalid_field(name, format!("unknown value {v:?}; allowed: {}", allowed.join(", ")))
                })
            })
            .transpose()
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryParams {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::parse(parts.uri.query().unwrap_or("")))
    }
}
