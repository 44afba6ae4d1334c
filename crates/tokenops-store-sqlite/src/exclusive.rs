//! Roles one process at a time plays on a store (`Store::exclusive`): an exclusive lock on a
//! file beside the database, `{database}-{role}.lock`, held open while the role is; the
//! holder's death closes the file and frees the role.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::Path;
use tokenops_store::{Exclusive, StoreError, StoreResult};

pub(crate) fn exclusive(database: &Path, role: &str) -> StoreResult<Option<Exclusive>> {
    let mut name = database.as_os_str().to_owned();
    name.push(format!("-{role}.lock"));
    // Not truncated: the file's content means nothing, only its lock.
    let file: File = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&name)
        .map_err(|e| StoreError::Backend(Box::new(e)))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(Exclusive::until_dropped(file))),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(error)) => Err(StoreError::Backend(Box::new(error))),
    }
}
