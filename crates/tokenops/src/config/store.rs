//! The store's settings: `TOKENOPS_DATABASE_URL` (SQLite by default, or PostgreSQL) and the
//! PostgreSQL schema.

use super::redact::redact_url;
use super::sources::Reader;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatabaseUrl {
    Sqlite(PathBuf),
    Postgres { url: String, schema: Option<String> },
}

pub(super) fn read(r: &mut Reader, data_dir: &Path) -> DatabaseUrl {
    let schema = r.text("TOKENOPS_DATABASE_SCHEMA");
    let raw_url = r
        .text("TOKENOPS_DATABASE_URL")
        .unwrap_or_else(|| format!("sqlite://{}", data_dir.join("tokenops.db").display()));
    match database_url(&raw_url, schema) {
        Ok(db) => db,
        Err(problem) => {
            r.problems.push(format!("TOKENOPS_DATABASE_URL={}: {problem}", redact_url(&raw_url)));
            DatabaseUrl::Sqlite(data_dir.join("tokenops.db"))
        }
    }
}

fn database_url(raw: &str, schema: Option<String>) -> Result<DatabaseUrl, String> {
    if let Some(path) = raw.strip_prefix("sqlite://") {
        if path.is_empty() {
            return Err("sqlite:// needs a file path, for example sqlite://./data/tokenops.db".into());
        }
        return Ok(DatabaseUrl::Sqlite(PathBuf::from(path)));
    }
    if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
        return Ok(DatabaseUrl::Postgres { url: raw.to_owned(), schema });
    }
    let scheme = raw.split("://").next().unwrap_or(raw);
    Err(format!("unsupported scheme {scheme:?}: use sqlite://<file> (the default) or postgres://…"))
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load;

    #[test]
    fn a_bad_database_url_does_not_leak_a_query_password() {
        let text =
            load(&[("TOKENOPS_DATABASE_URL", "mysql://host/db?user=u&password=secret")]).expect_err("bad").to_string();
        assert!(text.contains("TOKENOPS_DATABASE_URL") && !text.contains("secret"), "{text}");
    }
}
