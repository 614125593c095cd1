//! Errors and warnings of loading `edge.yaml`.
//!
//! Every message starts with the file it is about and, after it, the field
//! path (`nodes[0].providers[1].base_url`), so an operator can go straight to
//! the line. A file that breaks several rules reports all of them at once, one
//! per line.

use std::fmt;

/// One broken rule, at one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// Field path inside the file, e.g. `nodes[0].providers[1].base_url`.
    pub path: String,
    /// What is wrong, without the path or file.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Why `edge.yaml` could not be loaded.
///
/// `Display` prefixes every line with the file name. The Edge refuses to
/// start on any of these.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{origin}: cannot read: {message}")]
    Read {
        /// The file.
        origin: String,
        /// The I/O error, as text.
        message: String,
    },
    /// The text is not YAML, or does not fit the schema (unknown field, wrong
    /// type, missing field). serde_yaml stops at the first such error; its
    /// message already holds the field path and line/column.
    #[error("{origin}: {message}")]
    Parse {
        /// The file.
        origin: String,
        /// serde_yaml's message: `path: what at line L column C`.
        message: String,
    },
    /// The file parsed but breaks one or more rules; all of them are listed.
    #[error("{}", Lines { origin, issues })]
    Invalid {
        /// The file.
        origin: String,
        /// Every broken rule, in file order. Never empty.
        issues: Vec<Issue>,
    },
}

impl ConfigError {
    /// The file the error is about.
    pub fn origin(&self) -> &str {
        match self {
            Self::Read { origin, .. }
            | Self::Parse { origin, .. }
            | Self::Invalid { origin, .. } => origin,
        }
    }

    /// The broken rules of an [`ConfigError::Invalid`]; empty otherwise.
    pub fn issues(&self) -> &[Issue] {
        match self {
            Self::Invalid { issues, .. } => issues,
            _ => &[],
        }
    }
}

/// Something allowed but worth an operator's attention (a plaintext token, a
/// node that can never register successfully). The caller logs these at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The file.
    pub origin: String,
    /// The field it is about.
    pub issue: Issue,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.origin, self.issue)
    }
}

/// `origin: path: message` lines, joined by `\n`.
struct Lines<'a> {
    origin: &'a str,
    issues: &'a [Issue],
}

impl fmt::Display for Lines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, issue) in self.issues.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{}: {issue}", self.origin)?;
        }
        Ok(())
    }
}
