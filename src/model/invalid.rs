//! The validation error of the model: one bad value, named the way the caller wrote it.

/// A bad input value: `field` names it as the request spelled it (`programs[0].name`), and
/// `message` says what is wrong and, where the caller can act, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

impl Invalid {
    /// The value of `field` is wrong because of `message`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Invalid {
            field: field.into(),
            message: message.into(),
        }
    }
}
