//! The error of compiling a script or reading its declarations: the compiler's own message and,
//! when known, where in the source it points.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    pub message: String,
    /// 1-based line of the source the message is about.
    pub line: Option<usize>,
    /// 1-based column (in characters) on that line.
    pub column: Option<usize>,
}

impl ScriptError {
    pub fn new(message: impl Into<String>) -> ScriptError {
        ScriptError { message: message.into(), line: None, column: None }
    }

    pub fn at(message: impl Into<String>, line: usize, column: usize) -> ScriptError {
        ScriptError { message: message.into(), line: Some(line), column: Some(column) }
    }

    /// Rhai's positions are 1-based and "none" for the end of input or a synthetic node.
    pub(crate) fn at_position(message: impl Into<String>, pos: rhai::Position) -> ScriptError {
        ScriptError { message: message.into(), line: pos.line(), column: pos.position() }
    }
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "line {line}, column {column}: {}", self.message),
            (Some(line), None) => write!(f, "line {line}: {}", self.message),
            _ => f.write_str(&self.message),
        }
    }
}

impl std::error::Error for ScriptError {}
