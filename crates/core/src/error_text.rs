use std::error::Error as StdError;

/// The cause of an error whose type varies (an SDK's, a driver's, or a plain message).
pub type BoxError = Box<dyn StdError + Send + Sync>;

/// An error and its sources on one line (`client error (Connect): tcp connect error:
/// Connection refused`): SDK and HTTP errors hide the useful part in the chain. A source
/// whose text the line already holds is skipped.
pub fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: &'static str,
        #[source]
        source: Option<Box<Layer>>,
    }

    #[test]
    fn sources_join_once() {
        let inner = Layer {
            text: "connection refused",
            source: None,
        };
        let middle = Layer {
            text: "connect: connection refused",
            source: Some(Box::new(inner)),
        };
        let outer = Layer {
            text: "request failed",
            source: Some(Box::new(middle)),
        };
        assert_eq!(
            error_chain(&outer),
            "request failed: connect: connection refused"
        );
    }
}
