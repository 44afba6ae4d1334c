//! Webhook delivery's pure parts and its one outbound transport. The app keeps registrations,
//! deliveries and their history; this crate decides what a URL is, which addresses may be
//! reached, how a delivery is signed (and verified by a receiver), when an attempt is retried,
//! and makes the attempt itself.
//!
//! - [`url`]: `normalise` an integrator's URL into a [`WebhookUrl`].
//! - [`address`]: the public-address rule ([`AddressRule`]) and resolution against it.
//! - [`signing`]: secrets, `Webhook-Signature`, `Content-Digest`, the `X-JWS-Signature` claims,
//!   and `delivery_headers`: every header of one attempt.
//! - [`verify`]: the receiver's checks of both schemes (used by tests; shown in the docs).
//! - [`retry`]: the attempt budget, the backoff schedule and the retry/park decision.
//! - [`transport`]: the HTTPS POST that connects only to checked addresses.
//! - [`destinations`]: the bound on attempts in flight per destination.

pub mod address;
pub mod destinations;
pub mod retry;
pub mod signing;
pub mod transport;
pub mod url;
pub mod verify;

pub use address::{AddressError, AddressRule, parse_cidrs};
pub use destinations::{DestinationSlots, Slot};
pub use retry::{
    AttemptOutcome, FailureClass, MAX_ATTEMPTS, NextStep, RetrySchedule, SUSPEND_AFTER_FAILURES, next_step,
};
pub use signing::{DeliveryClaims, DeliverySigning, JwsKey, delivery_headers};
pub use transport::{Transport, TransportError};
pub use url::{UrlError, WebhookUrl, normalise};
pub use verify::{JwsExpectations, VerifyError};
