//! The tokenops binary as a library: configuration, wiring of the store, app, identity and HTTP
//! layers, and the `serve` loop with graceful shutdown. `main.rs` is only the command line; the
//! test kit builds the very same service through [`wiring`].

pub mod audit_verify;
pub mod config;
pub mod demo;
pub mod listener;
pub mod otlp;
pub mod serve;
pub mod wiring;
