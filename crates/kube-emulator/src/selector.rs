//! `labelSelector` and `fieldSelector` query parameters.

use serde_json::Value;

use crate::error::ApiError;

#[derive(Debug, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Debug, Default)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(text) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part).ok_or_else(|| {
                ApiError::bad_request(format!("unable to parse requirement: {part:?}"))
            })?);
        }
        Ok(Self(requirements))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        let labels = &object["metadata"]["labels"];
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => label(k) == Some(v),
            Requirement::NotEquals(k, v) => label(k) != Some(v),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::NotExists(k) => label(k).is_none(),
        })
    }
}

/// Commas inside `in (a,b)` do not separate requirements.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(part: &str) -> Option<Requirement> {
    if let Some(key) = part.strip_prefix('!') {
        return valid_key(key.trim()).map(Requirement::NotExists);
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Some(Requirement::NotEquals(
            valid_key(key.trim())?,
            value.trim().into(),
        ));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Some(Requirement::Equals(
            valid_key(key.trim())?,
            value.trim().into(),
        ));
    }
    let mut words = part.splitn(2, char::is_whitespace);
    let key = valid_key(words.next()?.trim())?;
    let Some(rest) = words.next().map(str::trim) else {
        return Some(Requirement::Exists(key));
    };
    let (negated, list) = if let Some(list) = rest.strip_prefix("notin") {
        (true, list)
    } else {
        (false, rest.strip_prefix("in")?)
    };
    let list = list.trim().strip_prefix('(')?.strip_suffix(')')?;
    let values = list.split(',').map(|v| v.trim().to_string()).collect();
    Some(if negated {
        Requirement::NotIn(key, values)
    } else {
        Requirement::In(key, values)
    })
}

fn valid_key(key: &str) -> Option<String> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    ok.then(|| key.to_string())
}

/// A parsed field selector over dotted paths such as `metadata.name`.
#[derive(Debug, Default)]
pub(crate) struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let path = field.trim().split('.').map(str::to_string).collect();
            terms.push((path, equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(path, equal, value)| {
            let found = path.iter().try_fold(object, |v, key| v.get(key));
            let text = match found {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (text == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_requirements() {
        let object = labelled(json!({"app": "web", "tier": "front"}));
        let matches = |s: &str| LabelSelector::parse(s).unwrap().matches(&object);
        assert!(matches(""));
        assert!(matches("app=web"));
        assert!(matches("app==web,tier"));
        assert!(!matches("app=db"));
        assert!(matches("app!=db"));
        assert!(!matches("app!=web"));
        assert!(matches("tier in (back, front)"));
        assert!(!matches("tier notin (back,front)"));
        assert!(matches("tier notin (back),app in (web)"));
        assert!(!matches("!app"));
        assert!(matches("!missing"));
        assert!(!matches("missing"));
        assert!(matches("missing notin (x)"));
        assert!(!matches("missing in (x)"));
        assert!(LabelSelector::parse("app in web").is_err());
    }

    #[test]
    fn field_terms() {
        let object = labelled(json!({}));
        let matches = |s: &str| FieldSelector::parse(s).unwrap().matches(&object);
        assert!(matches("metadata.name=a"));
        assert!(matches("metadata.name==a,metadata.namespace!=other"));
        assert!(!matches("metadata.namespace=other"));
        assert!(!matches("metadata.name!=a"));
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
