//! Error lists rendered the way Kubernetes' Go `utilerrors.NewAggregate` renders them, so
//! that deny messages read exactly as the Go webhook's: one error alone is its own text;
//! several are flattened (nested lists included), deduplicated by text and shown as
//! `[a, b]`.

use std::collections::HashSet;
use std::fmt;

/// One error, or a list of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GoError {
    Message(String),
    Aggregate(Vec<GoError>),
}

impl GoError {
    /// A list, or `None` when it is empty: Go's `NewAggregate` returns nil then, and callers
    /// only keep non-nil errors.
    pub fn aggregate(errors: Vec<GoError>) -> Option<GoError> {
        if errors.is_empty() {
            None
        } else {
            Some(GoError::Aggregate(errors))
        }
    }

    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a GoError)) {
        match self {
            GoError::Aggregate(list) => list.iter().for_each(|e| e.visit(f)),
            GoError::Message(_) => f(self),
        }
    }
}

impl From<String> for GoError {
    fn from(message: String) -> Self {
        GoError::Message(message)
    }
}

impl fmt::Display for GoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = match self {
            GoError::Message(m) => return f.write_str(m),
            GoError::Aggregate(list) => list,
        };
        match list.as_slice() {
            [] => Ok(()),
            [only] => only.fmt(f),
            _ => {
                let mut seen = HashSet::new();
                let mut texts = Vec::new();
                self.visit(&mut |e| {
                    let text = e.to_string();
                    if seen.insert(text.clone()) {
                        texts.push(text);
                    }
                });
                if texts.len() == 1 {
                    f.write_str(&texts[0])
                } else {
                    write!(f, "[{}]", texts.join(", "))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::GoError::{Aggregate, Message};
    use super::*;

    fn m(s: &str) -> GoError {
        Message(s.into())
    }

    #[test]
    fn renders_like_go() {
        assert_eq!(Aggregate(vec![m("a")]).to_string(), "a");
        assert_eq!(
            Aggregate(vec![Aggregate(vec![m("a"), m("b")])]).to_string(),
            "[a, b]"
        );
        assert_eq!(
            Aggregate(vec![Aggregate(vec![m("a"), m("b")]), m("a"), m("c")]).to_string(),
            "[a, b, c]"
        );
        assert_eq!(Aggregate(vec![m("a"), m("a")]).to_string(), "a");
        assert_eq!(GoError::aggregate(vec![]), None);
    }
}
