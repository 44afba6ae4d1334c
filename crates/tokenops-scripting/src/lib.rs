//! The Rhai sandbox of tokenops: the declaration form of a script's parameters (`params`), the
//! compilation of a script with its imports (`compile`), and a run within limits against the
//! host API (`sandbox`). It knows nothing of HTTP or the store: the app supplies the scripts a
//! script imports (`DependencySource`) and the host (`Host`).

mod compile;
mod convert;
pub mod decimal;
mod error;
pub mod params;
mod sandbox;

pub use compile::{Compiled, Compiler, DependencySource, EVENT_VARIABLE};
pub use error::ScriptError;
pub use params::{Override, ParamDecl, ParamKind, ParamValue};
pub use sandbox::{Host, Limit, Limits, RUN_STACK_BYTES, RunError, RunErrorKind, RunOutcome};
