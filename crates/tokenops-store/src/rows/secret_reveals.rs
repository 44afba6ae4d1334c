//! One-time secret reveals as read from and written to either backend.

use crate::SecretRevealRecord;

stored_table! {
    columns SECRET_REVEAL_COLUMNS of "secret_reveals";
    table SECRET_REVEALS by token_hash;
    decode secret_reveal -> SecretRevealRecord, encode;
    { token_hash, client_id, sealed_secret, expires_at, created_at }
}
