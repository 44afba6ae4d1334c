//! Secrets at rest: the one way tokenops seals what it must be able to read back (the identity
//! provider's signing keys, custody's wallet keys, queued mail) under the platform master key.
//!
//! A crate of its own so that identity and custody, which do not depend on each other, share
//! one implementation, one key format and one development key file instead of each keeping a
//! copy.

mod sealing;

pub use sealing::{KeyTextError, SealError, Sealer};
