//! The Clock port, re-exported from `tokenops-domain` (where every layer can reach it) so that
//! `tokenops_app::clock::{Clock, SystemClock, ManualClock}` keeps working.

pub use tokenops_domain::clock::{Clock, ManualClock, SystemClock};
