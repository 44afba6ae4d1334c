//! The Rhai sandbox of tokenops: the declaration form of a script's parameters (`params`), the
//! compilation of a script with its imports (`compile`), and a run within limits against the
//! host API (`sandbox`), whose memory is counted by the allocator (`memory`). It knows nothing
//! of HTTP or the store: the app supplies the scripts a script imports (`DependencySource`) and
//! the host (`Host`).

mod compile;
mod convert;
pub mod decimal;
mod error;
pub mod memory;
pub mod params;
mod sandbox;

pub use compile::{Compiled, Compiler, DependencySource, EVENT_VARIABLE};
pub use error::ScriptError;
pub use memory::CountingAllocator;
pub use params::{Override, ParamDecl, ParamKind, ParamValue};
pub use sandbox::{Host, Limit, Limits, RUN_STACK_BYTES, RunError, RunErrorKind, RunOutcome};

/// The unit tests' allocator counts, as the `tokenops` binary's does, so that runs here are held
/// to their memory budget. One global allocator per binary: outside tests, the binary declares it.
#[cfg(test)]
#[global_allocator]
static ALLOCATOR: CountingAllocator<std::alloc::System> = CountingAllocator::new(std::alloc::System);
